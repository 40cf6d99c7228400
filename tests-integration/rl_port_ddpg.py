"""A small data-parallel DDPG training script written against upstream tensordict.

It is the kind of script an RL library user writes, kept tiny so it runs in
seconds on two CPU cores:

1. a rollout buffer allocated on disk with `memmap_like` and filled step by step
   from a toy linear environment (16 environments in parallel);
2. a `DataLoader` with 2 worker processes over that buffer (each batch is one
   indexing op on the memory-mapped TensorDict);
3. an actor and a critic built from `TensorDictModule`s and chained in a
   `TensorDictSequential`;
4. a loss computed on TensorDicts and reduced over them (`mean`, `sum`);
5. target parameters taken with `TensorDict.from_module`, swapped into the
   network with `to_module` and soft-updated with `lerp_`;
6. two processes on 127.0.0.1 (gloo) averaging gradients and metrics with
   `all_reduce`, every wait bounded by a timeout;
7. a checkpoint saved with `memmap`, loaded with `load_memmap` into a fresh
   network, which must then act exactly as the trained one.

The last line printed is a JSON object of final numbers. td runs this file
unchanged once the two tensordict imports below are replaced by td's.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import tempfile
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from tensordict import TensorDict
from tensordict.nn import TensorDictModule, TensorDictSequential
from torch import nn
from torch.utils.data import DataLoader

SEED = 0
WORLD_SIZE = 2
NUM_ENVS = 16
STEPS = 64  # rows in the buffer: NUM_ENVS * STEPS
BATCH = 128
EPOCHS = 3
GAMMA = 0.9
TAU = 0.05  # soft-update rate of the target parameters
TIMEOUT = timedelta(seconds=60)  # bounds every collective and barrier
OBS, ACT = 4, 2


class QValue(nn.Module):
    """Q(observation, action) from the concatenation of both."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(OBS + ACT, 32), nn.Tanh(), nn.Linear(32, 1))

    def forward(self, observation: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([observation, action], -1))


def make_actor_critic() -> TensorDictSequential:
    actor = TensorDictModule(
        nn.Sequential(nn.Linear(OBS, 32), nn.Tanh(), nn.Linear(32, ACT), nn.Tanh()),
        in_keys=["observation"],
        out_keys=["action"],
    )
    critic = TensorDictModule(
        QValue(), in_keys=["observation", "action"], out_keys=["state_action_value"]
    )
    return TensorDictSequential(actor, critic)


def env_step(observation: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """A point mass: rewarded for staying near 0, the episode ends when it leaves the square."""
    position, velocity = observation[..., :2], observation[..., 2:]
    velocity = 0.9 * velocity + 0.1 * action
    position = position + 0.1 * velocity
    next_observation = torch.cat([position, velocity], -1)
    reward = -position.pow(2).sum(-1, keepdim=True)
    done = position.abs().amax(-1, keepdim=True) > 2.0
    return next_observation, reward, done


@torch.no_grad()
def collect(actor: TensorDictModule, buffer: TensorDict, generator: torch.Generator) -> None:
    """Fill `buffer` (NUM_ENVS * STEPS rows) with transitions of the exploring actor."""
    observation = torch.randn(NUM_ENVS, OBS, generator=generator)
    for t in range(STEPS):
        step = actor(TensorDict(observation=observation, batch_size=[NUM_ENVS]))
        noise = 0.3 * torch.randn(NUM_ENVS, ACT, generator=generator)
        step["action"] = (step["action"] + noise).clamp(-1, 1)
        next_observation, reward, done = env_step(observation, step["action"])
        step["next"] = TensorDict(
            observation=next_observation, reward=reward, done=done, batch_size=[NUM_ENVS]
        )
        buffer[t * NUM_ENVS : (t + 1) * NUM_ENVS] = step
        restart = torch.randn(NUM_ENVS, OBS, generator=generator)
        observation = torch.where(done, restart, next_observation)


def identity(batch: TensorDict) -> TensorDict:
    """The buffer's `__getitems__` already returns a batched TensorDict."""
    return batch


def ddpg_loss(
    actor_critic: TensorDictSequential, target_params: TensorDict, batch: TensorDict
) -> TensorDict:
    """The critic's TD error and the actor's objective, one row per transition."""
    critic = actor_critic[1]
    with torch.no_grad(), target_params.to_module(actor_critic):
        next_value = actor_critic(batch["next"].select("observation").clone())
    not_done = (~batch["next", "done"]).float()
    target = batch["next", "reward"] + GAMMA * not_done * next_value["state_action_value"]
    value = critic(batch.select("observation", "action").clone())["state_action_value"]
    # the actor is trained through a frozen copy of the critic's parameters
    with TensorDict.from_module(critic).detach().to_module(critic):
        actor_value = actor_critic(batch.select("observation").clone())["state_action_value"]
    return TensorDict(
        loss_value=(value - target).pow(2),
        loss_actor=-actor_value,
        batch_size=batch.batch_size,
    )


def average_gradients(module: nn.Module, world_size: int) -> None:
    grads = TensorDict.from_module(module).apply(lambda p: p.grad)
    grads.all_reduce()
    grads.apply_(lambda g: g / world_size)


def train(rank: int, world_size: int, port: int, workdir: str) -> None:
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world_size,
        timeout=TIMEOUT,
    )
    try:
        _train(rank, world_size, workdir)
    finally:
        dist.destroy_process_group()


def _train(rank: int, world_size: int, workdir: str) -> None:
    torch.manual_seed(SEED)  # same initial parameters on every rank
    torch.set_num_threads(1)
    actor_critic = make_actor_critic()
    actor = actor_critic[0]
    target_params = TensorDict.from_module(actor_critic).data.clone()
    optimizer = torch.optim.Adam(actor_critic.parameters(), lr=3e-3)
    generator = torch.Generator().manual_seed(SEED + rank)  # each rank explores its own way

    # 1. the rollout buffer: one memory-mapped file per leaf, rows written in place
    template = TensorDict(
        observation=torch.zeros(OBS),
        action=torch.zeros(ACT),
        next=TensorDict(
            observation=torch.zeros(OBS),
            reward=torch.zeros(1),
            done=torch.zeros(1, dtype=torch.bool),
        ),
    )
    buffer = template.expand(NUM_ENVS * STEPS).memmap_like(f"{workdir}/buffer{rank}")

    # 2 workers, forked once: they map the same files, so they see every refill of the buffer
    loader = DataLoader(
        buffer,
        batch_size=BATCH,
        shuffle=True,
        num_workers=2,
        collate_fn=identity,
        multiprocessing_context="fork",
        persistent_workers=True,
        generator=torch.Generator().manual_seed(SEED + rank),
    )
    for epoch in range(EPOCHS):
        collect(actor, buffer, generator)
        totals = []
        for batch in loader:
            losses = ddpg_loss(actor_critic, target_params, batch)
            loss = losses.mean().sum(reduce=True)
            optimizer.zero_grad()
            loss.backward()
            average_gradients(actor_critic, world_size)
            optimizer.step()
            target_params.lerp_(TensorDict.from_module(actor_critic).data, TAU)
            totals.append(losses.detach().mean())
        metrics = torch.stack(totals).mean()
        metrics["reward"] = buffer["next", "reward"].mean()
        metrics.all_reduce()
        metrics = metrics / world_size
        if rank == 0:
            line = {k: round(float(v), 6) for k, v in metrics.items()}
            print(f"epoch {epoch}: {line}", flush=True)

    # 3. checkpoint: parameters and target parameters, then a fresh network from it
    if rank == 0:
        TensorDict(params=TensorDict.from_module(actor_critic).data, target=target_params).memmap(
            f"{workdir}/checkpoint"
        )
    dist.monitored_barrier(timeout=TIMEOUT)
    checkpoint = TensorDict.load_memmap(f"{workdir}/checkpoint")
    restored = make_actor_critic()
    checkpoint["params"].to_module(restored)
    probe = TensorDict(observation=torch.linspace(-1, 1, 3 * OBS).view(3, OBS), batch_size=[3])
    with torch.no_grad():
        expected = actor_critic(probe.clone())["state_action_value"]
        got = restored(probe.clone())["state_action_value"]
    if not torch.equal(expected, got):
        raise AssertionError(f"rank {rank}: the restored network differs from the trained one")
    if rank == 0:
        summary = {
            **{k: float(v) for k, v in metrics.items()},
            "param_sum": float(TensorDict.from_module(actor_critic).data.sum(reduce=True)),
            "target_sum": float(checkpoint["target"].sum(reduce=True)),
            "probe_value": float(expected.sum()),
        }
        with open(f"{workdir}/summary.json", "w") as f:
            json.dump(summary, f)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(timeout: float = 120.0) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="ddpg_") as workdir:
        context = mp.start_processes(
            train,
            args=(WORLD_SIZE, free_port(), workdir),
            nprocs=WORLD_SIZE,
            join=False,
            start_method="fork",  # the ranks inherit the imports: no second start-up
        )
        deadline = time.monotonic() + timeout
        while not context.join(timeout=1.0):
            if time.monotonic() > deadline:
                for process in context.processes:
                    process.kill()
                raise TimeoutError(f"training did not finish within {timeout} s")
        with open(os.path.join(workdir, "summary.json")) as f:
            return json.load(f)


if __name__ == "__main__":
    print(json.dumps(main(float(sys.argv[1]) if len(sys.argv) > 1 else 120.0)))
