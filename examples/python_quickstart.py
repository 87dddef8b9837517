"""Train CartPole-v1 through Gymnasium with CuMind, then play it with the trained agent.

    pip install .                       # in the repository, in a virtual environment
    python examples/python_quickstart.py

The training is CuMind's run (Rust), stepping Gymnasium's own CartPole-v1 in this interpreter;
it stops once 20 greedy evaluation episodes average 490, or after 30,000 environment steps.
"""

import gymnasium as gym

import cumind

# Any Gymnasium id (or environment object) with discrete actions; the configuration is a dict
# of configuration.json's sections, layered over the defaults.
run = cumind.train({"training": {"max_env_steps": 30000}}, env="gymnasium:CartPole-v1", seed=7)
print("run directory:", run)

agent = cumind.Agent.load(run)
env = gym.make("CartPole-v1")
for episode in range(3):
    obs, _ = env.reset(seed=100 + episode)
    total, done = 0.0, False
    while not done:
        obs, reward, terminated, truncated, _ = env.step(agent.select_action(obs))
        total += reward
        done = terminated or truncated
    print(f"episode {episode}: return {total:.0f}")
