"""The process side of :class:`ParallelEnv`: one worker's loop, and the message framing.

Protocol: one duplex pipe per worker carries frames in the format of
``multiprocessing.Connection`` (a 4-byte big-endian length, then the payload), never empty.

- parent -> worker: ``STEP`` / ``STEP_RESET`` (one byte: the inputs are in the shared buffers),
  ``CLOSE``, or a pickled tuple for the rare commands (``("step", present)``,
  ``("step_reset", present)``, ``("reset", present, kwargs)``, ``("seed", seed, static)``);
- worker -> parent: ``READY`` once the env is built, ``OK`` after a step or reset,
  ``RESET_NONE`` / ``RESET_DONE`` after a step-and-reset (whether the root buffer was written),
  a pickled ``("seed", value)``, or a pickled ``("error", index, command, type, message,
  traceback)`` when anything raised. Pickled payloads start with the pickle protocol byte
  ``0x80``, which no one-byte message uses.

The hot path reads and writes the pipes' file descriptors directly (a one-byte message is one
``read`` and one ``write`` system call, see :func:`read_frame`). The worker never pickles step
data: it reads actions and states from, and writes outputs into, its slice of the shared buffers.
"""

from __future__ import annotations

import os
import pickle
import signal
import struct
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from torchrl._processes import exit_worker, parent_gone, watch_parent
from torchrl._td_compat import entries
from torchrl.envs.batched._inner import check_value, fast_step, inner_step, reset_finished
from torchrl.envs.batched._layout import Layout, get_leaf
from torchrl.envs.common import EnvBase, next_seed

STEP = b"s"
STEP_RESET = b"x"
CLOSE = b"c"
READY = b"r"
OK = b"k"
RESET_NONE = b"0"
RESET_DONE = b"1"
PICKLED = 0x80

_HEADER = struct.Struct("!i")


def frame(payload: bytes) -> bytes:
    """A message as it travels: its length (4 bytes, big-endian) and the payload."""
    return _HEADER.pack(len(payload)) + payload


def write_frame(fd: int, data: bytes) -> None:
    """Writes a framed message (as made by :func:`frame`) to a file descriptor."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def read_frame(fd: int) -> bytes:
    """Reads one message from a file descriptor; ``EOFError`` when the other end is closed.

    A one-byte message (the hot path) is read with a single system call. Never reads past the
    message: the next one, if already sent, stays in the pipe.
    """
    data = os.read(fd, 5)
    while len(data) < 4:
        more = os.read(fd, 4 - len(data))
        if not more:
            raise EOFError
        data += more
    (size,) = _HEADER.unpack_from(data)
    payload = data[4:]
    while len(payload) < size:
        more = os.read(fd, size - len(payload))
        if not more:
            raise EOFError
        payload += more
    return payload


FRAMES = {m: frame(m) for m in (STEP, STEP_RESET, CLOSE, READY, OK, RESET_NONE, RESET_DONE)}


def _error_frame(index: int, command: str, err: BaseException) -> bytes:
    return pickle.dumps(
        ("error", index, command, type(err).__name__, str(err), traceback.format_exc()),
        protocol=pickle.HIGHEST_PROTOCOL,
    )


class _Worker:
    """One worker's env and its views of the shared buffers."""

    def __init__(
        self,
        index: int,
        env: EnvBase,
        layouts: tuple[Layout, Layout, Layout],
        buffers: tuple[TensorDictBase, TensorDictBase, TensorDictBase],
        step_present: list[bool],
    ) -> None:
        self.index = index
        self.env = env
        self.fast = fast_step(env)
        self.fused = getattr(env, "_fused_step_and_reset", False)
        self.input_layout, self.step_layout, self.root_layout = layouts
        inputs, steps, roots = buffers
        self.inputs = [get_leaf(inputs, p)[index] for p in self.input_layout.paths]
        self.steps = [get_leaf(steps, p)[index] for p in self.step_layout.paths]
        self.roots = [get_leaf(roots, p)[index] for p in self.root_layout.paths]
        # What a step reads when every input is present: actions and states, not the masks.
        self.step_present = step_present

    def _inputs(self, present: list[bool]) -> TensorDictBase | None:
        if not any(present):
            return None
        values = [v if keep else None for v, keep in zip(self.inputs, present)]
        return self.input_layout.build(values, full=False)

    def _write(self, out: TensorDictBase, layout: Layout, views: list, what: str) -> None:
        keys = layout.flat_keys
        if keys is not None and type(out) is TensorDict:
            # the common case: a plain TensorDict holding every entry of a flat layout
            raw = entries(out)
            values = [raw.get(key) for key in keys]
            if all(
                type(v) is torch.Tensor and v.shape == view.shape for v, view in zip(values, views)
            ):
                for value, view in zip(values, views):
                    view.copy_(value)
                return
        for path, spec, view in zip(layout.paths, layout.specs, views):
            value = get_leaf(out, path)
            if value is None and what == "reset":
                view.zero_()
                continue
            view.copy_(check_value(value, spec, path, self.index, what))

    def step(self, present: list[bool]) -> None:
        td = self._inputs(present)
        out = inner_step(self.env, td, self.fast)  # type: ignore[arg-type]
        self._write(out, self.step_layout, self.steps, "step")

    def step_reset(self, present: list[bool]) -> bytes:
        td = self._inputs(present)
        env = self.env
        if self.fused:
            # A batched env resets its finished sub-envs itself, worker by worker.
            # fused: the env is a batched env (BatchedEnvBase), which has this method
            out, root = env._step_and_reset_outputs(td)  # type: ignore[operator]
            self._write(out, self.step_layout, self.steps, "step")
        else:
            out = inner_step(env, td, self.fast)  # type: ignore[arg-type]
            self._write(out, self.step_layout, self.steps, "step")
            root = reset_finished(env, td, out)  # type: ignore[arg-type]
        if root is None:
            return RESET_NONE
        self._write(root, self.root_layout, self.roots, "reset")
        return RESET_DONE

    def reset(self, present: list[bool], kwargs: dict[str, Any]) -> None:
        root = self.env.reset(self._inputs(present), **kwargs)
        self._write(root, self.root_layout, self.roots, "reset")

    def handle(self, message: bytes) -> bytes:
        if message == STEP:
            self.step(self.step_present)
            return OK
        if message == STEP_RESET:
            return self.step_reset(self.step_present)
        command = pickle.loads(message)
        op = command[0]
        if op == "step":
            self.step(command[1])
            return OK
        if op == "step_reset":
            return self.step_reset(command[1])
        if op == "reset":
            self.reset(command[1], command[2])
            return OK
        if op == "seed":
            value = self.env.set_seed(command[1], static_seed=command[2])
            return pickle.dumps(("seed", int(value)), protocol=pickle.HIGHEST_PROTOCOL)
        raise ValueError(f"unknown command {op!r}")


def _command_name(message: bytes) -> str:
    names = {STEP: "step", STEP_RESET: "step_and_maybe_reset"}
    if message in names:
        return names[message]
    try:
        return str(pickle.loads(message)[0])
    except Exception:
        return repr(message[:20])


def worker_main(
    index: int,
    create_env_fn: Callable[..., EnvBase],
    create_env_kwargs: dict[str, Any],
    conn: Connection,
    inherited: list[Connection],
    num_threads: int,
    layouts: tuple[Layout, Layout, Layout],
    buffers: tuple[TensorDictBase, TensorDictBase, TensorDictBase],
    step_present: list[bool],
    parent_pid: int,
    base_seed: int,
) -> None:
    """Builds the env, then serves the parent's commands until ``CLOSE`` or the parent is gone.

    Args:
        index: the worker's index (its slice of the buffers).
        create_env_fn: the env constructor.
        create_env_kwargs: its keyword arguments.
        conn: this worker's end of its pipe.
        inherited: the parent's ends of pipes that a fork copied here; closed at once, so that
            the parent's death closes every pipe of this worker.
        num_threads: torch threads in this process.
        layouts: the input, step-output and reset-output layouts.
        buffers: the shared buffers matching ``layouts`` (batched shape).
        step_present: which input entries a step reads (actions and states, not the masks).
        parent_pid: the parent's pid: the worker ends within a second of its death, even in
            the middle of a step (see :func:`torchrl._processes.watch_parent`).
        base_seed: the parent's ``torch.initial_seed()``; torch's global generator of worker
            ``i`` is seeded from it and ``i``, so that workers draw different numbers (a fork
            would otherwise copy one generator into every worker) and runs repeat.
    """
    watch_parent(parent_pid)
    # Ctrl-C goes to the whole process group: the parent handles it and closes the workers.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for other in inherited:
        other.close()
    torch.set_num_threads(num_threads)
    torch.manual_seed(next_seed((base_seed + index) % 2**64))
    fd = conn.fileno()
    env = None
    try:
        env = create_env_fn(**create_env_kwargs)
        worker = _Worker(index, env, layouts, buffers, step_present)
        if tuple(env.batch_size) != tuple(layouts[1].root.inner):
            raise ValueError(
                f"the env built in the worker has batch size {list(env.batch_size)}, the one "
                f"built to read the specs had {list(layouts[1].root.inner)}"
            )
    except BaseException as err:
        try:
            write_frame(fd, frame(_error_frame(index, "start", err)))
        except OSError:
            pass
        if env is not None:
            _close_quietly(env)
        return
    frames = FRAMES
    try:
        write_frame(fd, frames[READY])
        while True:
            message = read_frame(fd)
            if message == CLOSE:
                return
            try:
                reply = worker.handle(message)
            except BaseException as err:
                reply = _error_frame(index, _command_name(message), err)
            write_frame(fd, frames.get(reply) or frame(reply))
    except (EOFError, OSError):
        pass  # the parent is gone (or closed the pipe: it is stopping this worker)
    finally:
        _close_quietly(env)
        if parent_gone():
            exit_worker()  # now, rather than after the interpreter's teardown


def _close_quietly(env: Any) -> None:
    try:
        env.close()
    except Exception:
        traceback.print_exc()
