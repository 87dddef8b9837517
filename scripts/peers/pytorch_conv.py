"""CuMind's convolutional MuZero network written in PyTorch, timed on the CPU.

The same shapes as CuMind's conv ResNet (src/network/conv.rs) for a board of C planes of
H x W and A actions: representation = conv3x3 (C -> ch) + plane norm + ReLU + residual blocks,
min-max scaled; dynamics = the latent with A constant action planes, the same trunk, and a
reward head (conv1x1 -> 1 plane, ReLU, Linear(H*W -> hidden), ReLU, Linear -> reward support);
prediction = residual blocks, a policy head (conv1x1 -> 2 planes, ReLU, Linear -> A) and a
value head (conv1x1 -> 1 plane, ReLU, Linear(H*W -> hidden), ReLU, Linear -> value support).
A plane norm normalises each sample over (C, H, W) with a per-channel scale and shift:
GroupNorm with one group. The training step is MuZero's: K dynamics steps with the gradient
halved entering each, soft cross-entropy against value, reward and policy targets (steps after
the first scaled 1/K), AdamW and gradient clipping at 5.

Prints one JSON object: training steps/s and recurrent inferences/s (dynamics + prediction
without gradient, outputs copied out as numpy arrays), medians of the repetitions.
"""

import argparse
import json
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, ch):
        super().__init__()
        self.conv1 = nn.Conv2d(ch, ch, 3, padding=1)
        self.norm1 = nn.GroupNorm(1, ch)
        self.conv2 = nn.Conv2d(ch, ch, 3, padding=1)
        self.norm2 = nn.GroupNorm(1, ch)

    def forward(self, x):
        h = F.relu(self.norm1(self.conv1(x)))
        return F.relu(x + self.norm2(self.conv2(h)))


class Trunk(nn.Module):
    def __init__(self, inputs, ch, blocks):
        super().__init__()
        self.conv = nn.Conv2d(inputs, ch, 3, padding=1)
        self.norm = nn.GroupNorm(1, ch)
        self.blocks = nn.Sequential(*[Block(ch) for _ in range(blocks)])

    def forward(self, x):
        return self.blocks(F.relu(self.norm(self.conv(x))))


def min_max(x):
    flat = x.flatten(1)
    lo = flat.min(1, keepdim=True).values
    hi = flat.max(1, keepdim=True).values
    return ((flat - lo) / (hi - lo + 1e-5)).view_as(x)


class Head(nn.Module):
    def __init__(self, inputs, hidden, outputs):
        super().__init__()
        self.hidden = nn.Linear(inputs, hidden)
        self.out = nn.Linear(hidden, outputs)

    def forward(self, x):
        return self.out(F.relu(self.hidden(x)))


class Net(nn.Module):
    def __init__(self, c, h, w, actions, ch, blocks, hidden, support):
        super().__init__()
        self.actions, self.board = actions, (h, w)
        self.represent = Trunk(c, ch, blocks)
        self.dynamics = Trunk(ch + actions, ch, blocks)
        self.reward_conv = nn.Conv2d(ch, 1, 1)
        self.reward = Head(h * w, hidden, support)
        self.predict_blocks = nn.Sequential(*[Block(ch) for _ in range(blocks)])
        self.policy_conv = nn.Conv2d(ch, 2, 1)
        self.policy = nn.Linear(2 * h * w, actions)
        self.value_conv = nn.Conv2d(ch, 1, 1)
        self.value = Head(h * w, hidden, support)

    def initial(self, obs):
        return min_max(self.represent(obs))

    def step(self, latent, action):
        b = latent.shape[0]
        planes = F.one_hot(action, self.actions).float().view(b, self.actions, 1, 1)
        planes = planes.expand(b, self.actions, *self.board)
        hidden = self.dynamics(torch.cat([latent, planes], 1))
        reward = self.reward(F.relu(self.reward_conv(hidden)).flatten(1))
        return min_max(hidden), reward

    def prediction(self, latent):
        h = self.predict_blocks(latent)
        policy = self.policy(F.relu(self.policy_conv(h)).flatten(1))
        value = self.value(F.relu(self.value_conv(h)).flatten(1))
        return policy, value


def soft_ce(logits, target):
    return -(target * F.log_softmax(logits, -1)).sum(-1)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--board", default="3,6,7", help="C,H,W of the observation")
    p.add_argument("--actions", type=int, default=7)
    p.add_argument("--channels", type=int, default=32)
    p.add_argument("--blocks", type=int, default=2)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--support", type=int, default=5)
    p.add_argument("--train-batch", type=int, default=256)
    p.add_argument("--unroll", type=int, default=5)
    p.add_argument("--batch", type=int, default=256, help="inference batch")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repetitions", type=int, default=15)
    p.add_argument("--warmup", type=int, default=3)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    c, h, w = (int(v) for v in args.board.split(","))
    net = Net(c, h, w, args.actions, args.channels, args.blocks, args.hidden, args.support)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3, weight_decay=1e-4)

    def timed(fn):
        for _ in range(args.warmup):
            fn()
        samples = []
        for _ in range(args.repetitions):
            t = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - t)
        return statistics.median(samples)

    n = args.batch
    obs = torch.rand(n, c, h, w) * 0.2 - 0.1
    actions = torch.arange(n) % args.actions
    with torch.no_grad():
        latent = net.initial(obs)

    def recurrent():
        with torch.no_grad():
            nxt, r = net.step(latent, actions)
            pol, val = net.prediction(nxt)
            pol.numpy(), val.numpy(), r.numpy()

    def initial():
        with torch.no_grad():
            pol, val = net.prediction(net.initial(obs))
            pol.numpy(), val.numpy()

    b, k = args.train_batch, args.unroll
    tobs = torch.rand(b, c, h, w).round()
    tact = torch.randint(0, args.actions, (b, k))
    tpol = torch.softmax(torch.randn(k + 1, b, args.actions), -1)
    tval = torch.softmax(torch.randn(k + 1, b, args.support), -1)
    trew = torch.softmax(torch.randn(k, b, args.support), -1)

    def train_step():
        latent = net.initial(tobs)
        latents, rewards = [latent], []
        for i in range(k):
            half = latent * 0.5 + latent.detach() * 0.5
            latent, reward = net.step(half, tact[:, i])
            latents.append(latent)
            rewards.append(reward)
        pol, val = net.prediction(torch.cat(latents))
        scale = torch.tensor([1.0] + [1.0 / k] * k).repeat_interleave(b)
        loss = ((soft_ce(val, tval.flatten(0, 1)) + soft_ce(pol, tpol.flatten(0, 1))) * scale).sum()
        loss = loss + soft_ce(torch.cat(rewards), trew.flatten(0, 1)).sum() / k
        loss = loss / b
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 5.0)
        opt.step()

    result = {
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "batch": n,
        "initial_per_second": n / timed(initial),
        "recurrent_per_second": n / timed(recurrent),
        "train_batch": b,
        "unroll_steps": k,
        "train_step_ms": timed(train_step) * 1e3,
    }
    result["train_steps_per_second"] = 1e3 / result["train_step_ms"]
    print(json.dumps(result))


if __name__ == "__main__":
    main()
