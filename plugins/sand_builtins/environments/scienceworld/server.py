"""One ScienceWorld JVM per environment instance, reached through py4j: started on first use, shut down and reaped.

Steps go through the server's raw ``step``/``getScore`` calls, skipping the
valid-action listing that ``ScienceWorldEnv.step`` builds on every call
(5-50x slower). Observations pass through :func:`canonical_listing`.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from sand_builtins.environments.jvm import reap_java
from sand_builtins.environments.scienceworld.listing import canonical_listing
from sand_framework.errors import EnvironmentUnavailable, install_hint

INSTALL_HINT = (
    "the scienceworld environment needs the 'scienceworld' package (1.2.3, the jar is inside the wheel) "
    f"and a Java runtime (>= 11) on PATH; {install_hint('scienceworld')}"
)

_MAX_VARIATIONS: dict[str, int] = {}
"""Task name -> number of variations (asked from the jar once per process)."""
_ENV_LOCK = threading.Lock()
"""Guards the brief JAVA_TOOL_OPTIONS change while a JVM is launched (py4j passes no per-process env)."""


def _import_scienceworld() -> Any:
    try:
        import scienceworld  # noqa: F401
        from scienceworld import ScienceWorldEnv
    except ImportError as exc:
        raise EnvironmentUnavailable(INSTALL_HINT) from exc
    return ScienceWorldEnv


def _infer_task(name: str) -> str:
    """Old ``task-N-name`` spelling -> ScienceWorld 1.2 name (``task-1-boil`` -> ``boil``)."""
    from scienceworld.utils import infer_task

    return infer_task(name)


class JvmServer:
    """A ScienceWorld engine in its own JVM, loaded with one task variation at a time.

    ``params`` is the environment's: its ``java_heap`` and ``simplifications``
    are read when the JVM starts and when a task loads.
    """

    def __init__(self, params: Any):
        self.params = params
        self.sw: Any = None
        """The py4j-backed ``scienceworld.ScienceWorldEnv`` (None until first use and after :meth:`kill`)."""
        self._loaded: tuple[str, int, bool] | None = None

    def _env(self) -> Any:
        if self.sw is None:
            self.sw = self._start()
            self._loaded = None
        return self.sw

    def _start(self) -> Any:
        """Launch the JVM (~1.3 s) with the heap cap; raise EnvironmentUnavailable on failure."""
        SW = _import_scienceworld()
        with _ENV_LOCK:
            old = os.environ.get("JAVA_TOOL_OPTIONS")
            heap = self.params.java_heap
            if heap and "-Xmx" not in (old or ""):
                os.environ["JAVA_TOOL_OPTIONS"] = f"{old or ''} -Xmx{heap}".strip()
            try:
                return SW(envStepLimit=10**9)  # the environment counts steps itself
            except Exception as exc:  # noqa: BLE001 - java missing, port trouble, ...
                raise EnvironmentUnavailable(
                    f"scienceworld could not start its JVM ({type(exc).__name__}: {exc}); is `java` (>= 11) on PATH? "
                    + INSTALL_HINT
                ) from exc
            finally:
                if old is None:
                    os.environ.pop("JAVA_TOOL_OPTIONS", None)
                else:
                    os.environ["JAVA_TOOL_OPTIONS"] = old

    # ------------------------------------------------------------------ process

    def _java_process(self) -> Any:
        gw = getattr(self.sw, "_gateway", None) if self.sw is not None else None
        return getattr(gw, "java_process", None)

    @property
    def pid(self) -> int | None:
        proc = self._java_process()
        return proc.pid if proc is not None else None

    def dead(self) -> bool:
        """The JVM was started and has exited (killed, out of memory)."""
        proc = self._java_process()
        return proc is not None and proc.poll() is not None

    def kill(self) -> None:
        """Shut the JVM down and reap it (no java process outlives it). Idempotent."""
        proc = self._java_process()
        sw, self.sw, self._loaded = self.sw, None, None
        if sw is None:
            return
        if proc is not None and proc.poll() is None:
            try:
                sw.close()  # gateway shutdown + newline on stdin: the JVM exits by itself
            except Exception:  # noqa: BLE001 - a broken gateway is closed already
                pass
        else:
            try:
                sw._gateway.shutdown()
            except Exception:  # noqa: BLE001
                pass
        sw.close = lambda: None  # ScienceWorldEnv.__del__ calls close() again
        reap_java(proc)

    # ------------------------------------------------------------------ engine calls

    def check_variation(self, name: str, var: int, task_id: str) -> None:
        """ScienceWorld silently accepts any variation number; out-of-range ones are an error here."""
        if name not in _MAX_VARIATIONS:
            _MAX_VARIATIONS[name] = int(self._env().server.getTaskMaxVariations(_infer_task(name)))
        if var >= _MAX_VARIATIONS[name]:
            raise ValueError(f"bad task id {task_id!r}: {name} has variations 0..{_MAX_VARIATIONS[name] - 1}, "
                             f"not {var}")

    def load(self, name: str, var: int, gold: bool) -> None:
        """Load the variation, or reset it when it is already loaded the same way.

        A reset of a task loaded with a gold path re-generates the path (slow), so that case loads afresh.
        """
        sw = self._env()
        if self._loaded == (name, var, gold):
            sw.server.reset()
        else:
            sw.load(_infer_task(name), var, self.params.simplifications, generateGoldPath=gold)
            self._loaded = (name, var, gold)

    def look(self) -> str:
        """``look around``, canonical: ScienceWorld's usual first move."""
        return canonical_listing(str(self._env().server.step("look around")))

    def task_description(self) -> str:
        return str(self._env().server.freeActionTaskDesc())

    def gold_path(self) -> list[str]:
        """The loaded variation's gold actions (load it with ``gold=True``)."""
        return [str(a) for a in self._env().get_gold_action_sequence()]

    def step(self, action: str) -> tuple[str, float]:
        """(canonical observation, score 0-100) of one action."""
        server = self._env().server
        obs = canonical_listing(str(server.step(action)))
        score = round(100 * float(server.getScore()))
        return obs, score
