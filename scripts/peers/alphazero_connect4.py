"""A compact AlphaZero for Connect Four in PyTorch, evaluated against CuMind's opponents.

Self-play with the exact rules in the search (a bitboard Connect Four of its own), a conv
ResNet (stem conv3x3-BN-ReLU, 3 residual blocks of 32 channels, policy head conv1x1 -> 2
planes -> linear 7, value head conv1x1 -> 1 plane -> linear 64 -> ReLU -> linear 1 -> tanh)
on the environment's [3, 6, 7] planes (the mover's stones, the opponent's, a to-play plane that
is 1 when the first player moves; row 0 at the top), PUCT with 48 simulations (Dirichlet noise
alpha 1.0, fraction 0.25 at the root), 64 games played at once with one batched network call
per simulation step, moves sampled by visit count for the first 12 plies and the most visited
after, a replay window of the newest 60,000 positions sampled with random left-right mirroring,
Adam (lr 1e-3, weight decay 1e-4), batch 256, loss = value MSE + policy cross-entropy against
the root's visit distribution, value target = the game's outcome for the mover.

Rounds of 64 games, each followed by training steps that sample --replay-ratio (default 6)
positions per new one, repeat until --minutes of self-play and training are used (on
--threads, default 2; PyTorch's threads wait on each other badly when the cores are busy with
other work, so time it on idle cores or give it 1). The network is saved to --out and
evaluated (untimed) as `cumind eval --opponent OPP --random-opening 2` does: two random plies
(one by each player), then the agent (greedy, 48 simulations, no noise) against the opponent,
whose moves come from the `cumind` package's `connect_four_move` (the same bitboard alpha-beta
and solver as CuMind's arena). A markdown table of wins / draws / losses per side goes to
standard output, the figures to DIR/eval.json.

    python scripts/peers/alphazero_connect4.py --minutes 10 --out /tmp/az-c4
    python scripts/peers/alphazero_connect4.py --eval-only /tmp/az-c4 \
        --eval-opponents alphabeta:4,alphabeta:6
"""

import argparse
import json
import math
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import cumind

ROWS, COLS = 6, 7
CELLS = ROWS * COLS
H = ROWS + 1  # bits per column: six cells and a guard bit that stops lines wrapping
BOTTOM = [1 << (c * H) for c in range(COLS)]
TOP = [1 << (c * H + ROWS - 1) for c in range(COLS)]
COLUMN = [((1 << ROWS) - 1) << (c * H) for c in range(COLS)]
# The bit of each cell in row-major order, row 0 at the top.
CELL_BITS = np.array([c * H + (ROWS - 1 - r) for r in range(ROWS) for c in range(COLS)])


def aligned(b):
    """Whether the stones `b` hold four in a row (vertical, horizontal, two diagonals)."""
    for s in (1, H, H - 1, H + 1):
        m = b & (b >> s)
        if m & (m >> 2 * s):
            return True
    return False


def bits(x):
    return np.unpackbits(np.frombuffer(x.to_bytes(8, "little"), np.uint8), bitorder="little")


class Position:
    """A Connect Four position: the stones of the player to move and every stone."""

    __slots__ = ("mover", "stones", "player", "plies", "over", "won")

    def __init__(self, mover=0, stones=0, player=0, plies=0, over=False, won=False):
        self.mover, self.stones, self.player, self.plies = mover, stones, player, plies
        self.over, self.won = over, won  # won: the player who just moved made four

    def legal(self):
        return [c for c in range(COLS) if not self.stones & TOP[c]]

    def play(self, c):
        cell = (self.stones + BOTTOM[c]) & COLUMN[c]
        mine, stones = self.mover | cell, self.stones | cell
        won = aligned(mine)
        plies = self.plies + 1
        return Position(stones ^ mine, stones, 1 - self.player, plies, won or plies == CELLS, won)

    def observation(self):
        mine, every = bits(self.mover)[CELL_BITS], bits(self.stones)[CELL_BITS]
        to_play = np.full(CELLS, 1 - self.player, np.uint8)
        return np.stack([mine, every - mine, to_play]).reshape(3, ROWS, COLS).astype(np.float32)


class Block(nn.Module):
    def __init__(self, ch):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(ch, ch, 3, padding=1, bias=False), nn.BatchNorm2d(ch)
        self.conv2, self.bn2 = nn.Conv2d(ch, ch, 3, padding=1, bias=False), nn.BatchNorm2d(ch)

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        return F.relu(x + self.bn2(self.conv2(h)))


class Net(nn.Module):
    def __init__(self, ch=32, blocks=3):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, ch, 3, padding=1, bias=False),
                                  nn.BatchNorm2d(ch), nn.ReLU())
        self.blocks = nn.Sequential(*[Block(ch) for _ in range(blocks)])
        self.policy = nn.Sequential(nn.Conv2d(ch, 2, 1, bias=False), nn.BatchNorm2d(2), nn.ReLU(),
                                    nn.Flatten(), nn.Linear(2 * CELLS, COLS))
        self.value = nn.Sequential(nn.Conv2d(ch, 1, 1, bias=False), nn.BatchNorm2d(1), nn.ReLU(),
                                   nn.Flatten(), nn.Linear(CELLS, 64), nn.ReLU(),
                                   nn.Linear(64, 1), nn.Tanh())

    def forward(self, x):
        x = self.blocks(self.stem(x))
        return self.policy(x), self.value(x).squeeze(1)


class Node:
    """A searched position; its edges' statistics are kept from its mover's point of view."""

    __slots__ = ("pos", "prior", "n", "w", "children", "visits")

    def __init__(self, pos):
        self.pos, self.prior, self.children, self.visits = pos, None, {}, 0
        self.n, self.w = [0] * COLS, [0.0] * COLS


def evaluate(net, positions):
    """Priors over the legal moves and values for the movers of `positions`, in one call."""
    x = torch.from_numpy(np.stack([p.observation() for p in positions]))
    with torch.inference_mode():
        logits, values = net(x)
    logits = logits.numpy().astype(np.float64)
    priors = []
    for p, row in zip(positions, logits):
        legal = p.legal()
        e = np.exp(row[legal] - row[legal].max())
        prior = [0.0] * COLS
        for c, v in zip(legal, e / e.sum()):
            prior[c] = float(v)
        priors.append(prior)
    return priors, values.numpy().tolist()


def search(net, roots, sims, c_puct, rng, noise=None):
    """PUCT from every root at once: each simulation step descends once in every tree, and the
    new leaves are evaluated in one network call. noise: (alpha, fraction) at the roots."""
    priors, _ = evaluate(net, [r.pos for r in roots])
    for root, prior in zip(roots, priors):
        if noise:
            legal = root.pos.legal()
            eta = rng.dirichlet([noise[0]] * len(legal))
            for c, e in zip(legal, eta):
                prior[c] = (1 - noise[1]) * prior[c] + noise[1] * e
        root.prior = prior
    for _ in range(sims):
        leaves, paths = [], []
        for root in roots:
            node, path = root, []
            while node.prior is not None and not node.pos.over:
                scale = c_puct * math.sqrt(node.visits + 1)
                best, best_score = None, -1e9
                for c in node.pos.legal():
                    q = node.w[c] / node.n[c] if node.n[c] else 0.0
                    score = q + scale * node.prior[c] / (1 + node.n[c])
                    if score > best_score:
                        best, best_score = c, score
                path.append((node, best))
                if best not in node.children:
                    node.children[best] = Node(node.pos.play(best))
                node = node.children[best]
            if node.pos.over:  # the player who just moved won, or a draw
                backup(path, -1.0 if node.pos.won else 0.0)
            else:
                leaves.append(node)
                paths.append(path)
        if leaves:
            priors, values = evaluate(net, [leaf.pos for leaf in leaves])
            for leaf, path, prior, value in zip(leaves, paths, priors, values):
                leaf.prior = prior
                backup(path, value)


def backup(path, value):
    """value: for the mover at the end of `path`; each step up flips the point of view."""
    for node, c in reversed(path):
        value = -value
        node.n[c] += 1
        node.w[c] += value
        node.visits += 1


def self_play(net, args, rng):
    """A round of args.games games played to the end: (observations, policies, outcomes)."""
    net.eval()
    positions = [Position() for _ in range(args.games)]
    history = [[] for _ in range(args.games)]
    active = list(range(args.games))
    while active:
        roots = [Node(positions[i]) for i in active]
        search(net, roots, args.simulations, args.c_puct, rng, noise=(1.0, 0.25))
        for i, root in zip(active, roots):
            visits = np.array(root.n, np.float64)
            pi = visits / visits.sum()
            pos = positions[i]
            history[i].append((pos.observation(), pi.astype(np.float32), pos.player))
            move = rng.choice(COLS, p=pi) if pos.plies < args.sample_plies else int(visits.argmax())
            positions[i] = pos.play(int(move))
        active = [i for i in active if not positions[i].over]
    obs, pis, zs = [], [], []
    for pos, game in zip(positions, history):
        winner = 1 - pos.player if pos.won else None
        for o, pi, player in game:
            obs.append(o)
            pis.append(pi)
            zs.append(0.0 if winner is None else (1.0 if player == winner else -1.0))
    return np.stack(obs), np.stack(pis), np.array(zs, np.float32)


class Replay:
    """The newest `capacity` positions, in a ring."""

    def __init__(self, capacity):
        self.obs = np.zeros((capacity, 3, ROWS, COLS), np.float32)
        self.pi = np.zeros((capacity, COLS), np.float32)
        self.z = np.zeros(capacity, np.float32)
        self.capacity, self.size, self.next = capacity, 0, 0

    def add(self, obs, pi, z):
        for o, p, v in zip(obs, pi, z):
            self.obs[self.next], self.pi[self.next], self.z[self.next] = o, p, v
            self.next = (self.next + 1) % self.capacity
            self.size = min(self.size + 1, self.capacity)

    def sample(self, batch, rng):
        i = rng.integers(0, self.size, batch)
        obs, pi, z = self.obs[i], self.pi[i], self.z[i]
        flip = rng.random(batch) < 0.5  # left-right mirror
        obs[flip], pi[flip] = obs[flip][..., ::-1], pi[flip][:, ::-1]
        return torch.from_numpy(obs), torch.from_numpy(pi), torch.from_numpy(z)


def train_steps(net, opt, replay, steps, args, rng):
    net.train()
    totals = np.zeros(2)
    for _ in range(steps):
        obs, pi, z = replay.sample(args.batch, rng)
        logits, v = net(obs)
        value_loss = F.mse_loss(v, z)
        policy_loss = -(pi * F.log_softmax(logits, 1)).sum(1).mean()
        opt.zero_grad()
        (value_loss + policy_loss).backward()
        opt.step()
        totals += (value_loss.item(), policy_loss.item())
    return totals / max(steps, 1)


def train(net, args, rng):
    opt = torch.optim.Adam(net.parameters(), lr=1e-3, weight_decay=1e-4)
    replay = Replay(args.window)
    budget, used, rounds, games, positions, steps = args.minutes * 60, 0.0, 0, 0, 0, 0
    while used < budget:
        start = time.perf_counter()
        obs, pi, z = self_play(net, args, rng)
        replay.add(obs, pi, z)
        n = math.ceil(len(z) * args.replay_ratio / args.batch)
        value_loss, policy_loss = train_steps(net, opt, replay, n, args, rng)
        used += time.perf_counter() - start
        rounds, games, steps = rounds + 1, games + args.games, steps + n
        positions += len(z)
        print(f"round {rounds}: games {games}, positions {positions} (+{len(z)}), "
              f"train steps {steps} (+{n}), value loss {value_loss:.3f}, "
              f"policy loss {policy_loss:.3f}, elapsed {used:.1f} s", flush=True)
    return {"rounds": rounds, "games": games, "positions": positions, "train_steps": steps,
            "seconds": round(used, 1)}


def play_side(net, args, opponent, agent_player, n, rng):
    """n games with the agent as player `agent_player`: (wins, draws, losses) for the agent."""
    net.eval()
    positions = [Position() for _ in range(n)]
    for _ in range(args.random_opening):  # random plies by both players, as CuMind's eval
        positions = [p if p.over else p.play(int(rng.choice(p.legal()))) for p in positions]
    active = [i for i in range(n) if not positions[i].over]
    while active:
        if positions[active[0]].player == agent_player:  # every game is at the same ply
            roots = [Node(positions[i]) for i in active]
            search(net, roots, args.simulations, args.c_puct, rng)
            moves = [int(np.argmax(r.n)) for r in roots]
        else:
            moves = [cumind.connect_four_move(positions[i].observation(), opponent,
                                              seed=int(rng.integers(2**63))) for i in active]
        for i, m in zip(active, moves):
            positions[i] = positions[i].play(m)
        active = [i for i in active if not positions[i].over]
    record = {"wins": 0, "draws": 0, "losses": 0}
    for p in positions:
        key = "draws" if not p.won else ("wins" if 1 - p.player == agent_player else "losses")
        record[key] += 1
    return record


def evaluate_against(net, args, opponents, rng):
    results = {}
    for opponent in opponents:
        start = time.perf_counter()
        results[opponent] = {side: play_side(net, args, opponent, player, args.eval_games, rng)
                             for side, player in (("first", 0), ("second", 1))}
        print(f"evaluated against {opponent} in {time.perf_counter() - start:.1f} s", flush=True)
    return results


def table(results):
    cell = lambda r: f"{r['wins']} / {r['draws']} / {r['losses']}"
    lines = ["| opponent | as first: W / D / L | as second: W / D / L |", "|---|---:|---:|"]
    lines += [f"| {o} | {cell(r['first'])} | {cell(r['second'])} |" for o, r in results.items()]
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=10.0, help="self-play and training time")
    ap.add_argument("--out", default="alphazero-connect4", help="directory for network, results")
    ap.add_argument("--eval-only", metavar="DIR", help="evaluate the network saved in DIR")
    ap.add_argument("--eval-opponents", default="alphabeta:4",
                    help="comma list, as `cumind eval --opponent` takes them")
    ap.add_argument("--eval-games", type=int, default=100, help="games per side and opponent")
    ap.add_argument("--random-opening", type=int, default=2, help="random plies per eval game")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--games", type=int, default=64, help="self-play games at once, a round")
    ap.add_argument("--simulations", type=int, default=48)
    ap.add_argument("--c-puct", type=float, default=1.75)
    ap.add_argument("--sample-plies", type=int, default=12, help="plies sampled by visit count")
    ap.add_argument("--window", type=int, default=60000, help="replay window, positions")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--replay-ratio", type=float, default=6.0,
                    help="positions sampled in training per new self-play position")
    args = ap.parse_args()

    opponents = [o.strip() for o in args.eval_opponents.split(",") if o.strip()]
    if not hasattr(cumind, "connect_four_move"):
        raise SystemExit("this cumind package has no connect_four_move: `pip install .` it anew")
    opening = Position()
    for _ in range(args.random_opening):
        opening = opening.play(3)
    for opponent in opponents:  # refused here, not after the training (a ValueError says why)
        cumind.connect_four_move(opening.observation(), opponent, seed=0)

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    net = Net()
    summary = {"torch": torch.__version__, "threads": args.threads, "seed": args.seed,
               "simulations": args.simulations, "random_opening": args.random_opening,
               "eval_games_per_side": args.eval_games}
    if args.eval_only:
        out = args.eval_only
        saved = torch.load(os.path.join(out, "model.pt"))
        net.load_state_dict(saved["net"])
        summary["training"] = saved["training"]
    else:
        out = args.out
        os.makedirs(out, exist_ok=True)
        summary["training"] = train(net, args, rng)
        summary["training"].update(minutes=args.minutes, replay_ratio=args.replay_ratio)
        torch.save({"net": net.state_dict(), "training": summary["training"]},
                   os.path.join(out, "model.pt"))
        print(f"saved {os.path.join(out, 'model.pt')}")
    summary["results"] = evaluate_against(net, args, opponents, rng)
    print(table(summary["results"]))
    with open(os.path.join(out, "eval.json"), "w") as f:
        json.dump(summary, f, indent=2)
    print(f"wrote {os.path.join(out, 'eval.json')}")


if __name__ == "__main__":
    main()
