#!/usr/bin/env python3
"""CPU throughput of DeepMind's mctx MuZero search with a tiny random MLP model.

Model (plain jax, random weights, float32):
  representation h: obs(4)            -> 64 -> relu -> 64            (latent)
  dynamics       g: [latent, onehot a] (66) -> 64 -> relu -> 65      (latent 64 + reward 1)
  prediction     f: latent(64)        -> 64 -> relu -> 3             (2 policy logits + value)
Whole step (representation + search) is one jax.jit'd function; timings are
wall clock of the jitted call incl. block_until_ready, median over --reps runs
after --warmup runs. sims/s = batch * num_simulations / median_time.

Usage: python mctx_throughput.py [--batches 1 16 64 256] [--sims 50]
                                           [--gumbel-batches 64] [--reps 15]
Writes mctx_cpu.json in the current folder (or --out).
"""
import argparse
import json
import os
import platform
import statistics
import time

import jax
import jax.numpy as jnp
import jaxlib
import mctx
import numpy as np

OBS, ACT, LATENT, HIDDEN = 4, 2, 64, 64
DISCOUNT = 0.997


def dense_init(key, n_in, n_out):
    w = jax.random.normal(key, (n_in, n_out), jnp.float32) * (1.0 / np.sqrt(n_in))
    return {"w": w, "b": jnp.zeros((n_out,), jnp.float32)}


def mlp_init(key, n_in, n_hidden, n_out):
    k1, k2 = jax.random.split(key)
    return [dense_init(k1, n_in, n_hidden), dense_init(k2, n_hidden, n_out)]


def mlp(params, x):
    x = jax.nn.relu(x @ params[0]["w"] + params[0]["b"])
    return x @ params[1]["w"] + params[1]["b"]


def init_params(seed=0):
    kr, kd, kp = jax.random.split(jax.random.PRNGKey(seed), 3)
    return {
        "repr": mlp_init(kr, OBS, HIDDEN, LATENT),
        "dyn": mlp_init(kd, LATENT + ACT, HIDDEN, LATENT + 1),
        "pred": mlp_init(kp, LATENT, HIDDEN, ACT + 1),
    }


def representation(params, obs):
    return mlp(params["repr"], obs)


def prediction(params, latent):
    out = mlp(params["pred"], latent)
    return out[:, :ACT], out[:, ACT]


def recurrent_fn(params, rng_key, action, embedding):
    del rng_key
    x = jnp.concatenate([embedding, jax.nn.one_hot(action, ACT, dtype=embedding.dtype)], axis=-1)
    out = mlp(params["dyn"], x)
    next_latent, reward = out[:, :LATENT], out[:, LATENT]
    logits, value = prediction(params, next_latent)
    out = mctx.RecurrentFnOutput(
        reward=reward,
        discount=jnp.full_like(reward, DISCOUNT),
        prior_logits=logits,
        value=value,
    )
    return out, next_latent


def root_of(params, obs):
    latent = representation(params, obs)
    logits, value = prediction(params, latent)
    return mctx.RootFnOutput(prior_logits=logits, value=value, embedding=latent)


def make_search(kind, num_simulations, return_tree=False):
    if kind == "muzero":
        def policy(params, key, obs):
            return mctx.muzero_policy(
                params, key, root_of(params, obs), recurrent_fn,
                num_simulations=num_simulations,
                dirichlet_fraction=0.25, dirichlet_alpha=0.3)
    elif kind == "gumbel_muzero":
        def policy(params, key, obs):
            return mctx.gumbel_muzero_policy(
                params, key, root_of(params, obs), recurrent_fn,
                num_simulations=num_simulations,
                max_num_considered_actions=ACT)
    else:
        raise ValueError(kind)

    def search(params, key, obs):
        out = policy(params, key, obs)
        if return_tree:
            return out.search_tree.parents, out.search_tree.node_visits
        return out.action, out.action_weights
    return jax.jit(search)


def tree_depths(kind, sims, params, batch, n_keys=5, seed=1):
    """Max node depth per tree (diagnostic, untimed). mctx's batched search walks
    all trees in lockstep, so a simulation costs ~ the deepest path in the batch."""
    fn = make_search(kind, sims, return_tree=True)
    obs = jax.random.uniform(jax.random.PRNGKey(seed + 1), (batch, OBS), jnp.float32, -0.05, 0.05)
    maxd = []
    for i in range(n_keys):
        parents, visits = jax.device_get(fn(params, jax.random.fold_in(jax.random.PRNGKey(seed), 1000 + i), obs))
        depth = np.zeros(parents.shape, np.int64)
        for n in range(1, parents.shape[1]):  # nodes are appended after their parent
            p = parents[:, n]
            depth[:, n] = np.where(p >= 0, depth[np.arange(len(p)), np.maximum(p, 0)] + 1, 0)
        depth = np.where(visits > 0, depth, 0)
        maxd.append(depth.max(axis=1))
    maxd = np.concatenate(maxd)
    return float(maxd.mean()), int(maxd.max())


def bench(fn, params, batch, warmup, reps, seed=1):
    key = jax.random.PRNGKey(seed)
    obs = jax.random.uniform(jax.random.PRNGKey(seed + 1), (batch, OBS), jnp.float32, -0.05, 0.05)
    t0 = time.perf_counter()
    jax.block_until_ready(fn(params, key, obs))
    compile_s = time.perf_counter() - t0
    for i in range(warmup):
        jax.block_until_ready(fn(params, jax.random.fold_in(key, i), obs))
    times = []
    for i in range(reps):
        k = jax.random.fold_in(key, 1000 + i)
        t0 = time.perf_counter()
        jax.block_until_ready(fn(params, k, obs))
        times.append(time.perf_counter() - t0)
    return compile_s, times


def bench_model_only(params, batch, reps):
    """One recurrent inference (dynamics + prediction) at this batch, jitted."""
    fn = jax.jit(lambda p, a, e: recurrent_fn(p, None, a, e))
    emb = jnp.zeros((batch, LATENT), jnp.float32)
    act = jnp.zeros((batch,), jnp.int32)
    jax.block_until_ready(fn(params, act, emb))
    times = []
    for _ in range(max(reps, 50)):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(params, act, emb))
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def cpu_model():
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 16, 64, 256])
    ap.add_argument("--sims", type=int, nargs="+", default=[50])
    ap.add_argument("--gumbel-batches", type=int, nargs="*", default=[64])
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--out", default="mctx_cpu.json")
    args = ap.parse_args()
    assert args.reps >= 10

    load_start = open("/proc/loadavg").read().split()[:3]
    params = init_params()
    cases = [("muzero", b, s) for s in args.sims for b in args.batches]
    cases += [("gumbel_muzero", b, s) for s in args.sims for b in args.gumbel_batches]
    rows = []
    hdr = (f"{'policy':<14}{'batch':>6}{'sims':>6}{'ms/search':>12}{'p10 ms':>10}{'p90 ms':>10}"
           f"{'sims/s':>12}{'model ms':>10}{'compile s':>11}{'depth avg/max':>15}")
    print(hdr)
    print("-" * len(hdr))
    for kind, batch, sims in cases:
        fn = make_search(kind, sims)
        compile_s, times = bench(fn, params, batch, args.warmup, args.reps)
        med = statistics.median(times)
        q = np.quantile(times, [0.1, 0.9])
        model_ms = bench_model_only(params, batch, args.reps) * 1e3
        d_mean, d_max = tree_depths(kind, sims, params, batch)
        row = {
            "policy": kind, "batch": batch, "num_simulations": sims,
            "ms_per_search_median": med * 1e3,
            "ms_per_search_p10": float(q[0]) * 1e3, "ms_per_search_p90": float(q[1]) * 1e3,
            "simulations_per_second": batch * sims / med,
            "searches_per_second": batch / med,
            "model_recurrent_inference_ms": model_ms,
            "compile_plus_first_call_s": compile_s,
            "tree_max_depth_mean": d_mean, "tree_max_depth_max": d_max,
            "reps": len(times), "times_s": times,
        }
        rows.append(row)
        print(f"{kind:<14}{batch:>6}{sims:>6}{med*1e3:>12.3f}{q[0]*1e3:>10.3f}{q[1]*1e3:>10.3f}"
              f"{row['simulations_per_second']:>12.0f}{model_ms:>10.4f}{compile_s:>11.2f}{d_mean:>9.1f}/{d_max:<5d}")

    out = {
        "meta": {
            "what": "mctx search on CPU, tiny random MLP MuZero model, jit(representation+search)",
            "model": {"obs_dim": OBS, "num_actions": ACT, "latent": LATENT, "hidden": HIDDEN,
                      "layers": "2-layer MLPs (relu) for representation, dynamics(+reward), prediction(logits+value)",
                      "discount": DISCOUNT},
            "muzero_policy_kwargs": {"dirichlet_fraction": 0.25, "dirichlet_alpha": 0.3,
                                     "pb_c_init": 1.25, "pb_c_base": 19652, "temperature": 1.0},
            "gumbel_muzero_policy_kwargs": {"max_num_considered_actions": ACT},
            "timing": f"median of {args.reps} jitted calls after compile + {args.warmup} warmup, block_until_ready",
            "model_recurrent_inference_ms": "one jitted recurrent_fn (dynamics+prediction) call at that batch, for scale",
            "tree_max_depth": "untimed diagnostic: deepest visited node per tree, mean/max over batch x 5 keys; "
                              "mctx walks the batch in lockstep, so per-simulation cost tracks the deepest path",
            "versions": {"jax": jax.__version__, "jaxlib": jaxlib.__version__,
                         "mctx": getattr(mctx, "__version__", None), "numpy": np.__version__},
            "jax_devices": [str(d) for d in jax.devices()],
            "XLA_FLAGS": os.environ.get("XLA_FLAGS"),
            "loadavg_1_5_15_at_start": load_start,
            "loadavg_1_5_15_at_end": open("/proc/loadavg").read().split()[:3],
            "load_note": "a load average above the number of cores means other work competed for them",
            "nproc": os.cpu_count(),
            "cpu_model": cpu_model(),
            "python": platform.python_version(),
        },
        "results": rows,
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as fh:
        json.dump(out, fh, indent=1)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
