"""Where log records go: stderr at the level the user chose, and the run directory's ``run.log``.

SAND, its plugins and the libraries they use all log through Python's
:mod:`logging` under their own module names, so the records are routed at
the root logger, once per command (:func:`configure`): nothing needs a SAND
import to be seen. ``warnings.warn`` calls are routed the same way, so a
plugin's warning lands in ``run.log`` too.

The console handler looks up ``sys.stderr`` at every record instead of
keeping the stream it started with: rich's progress display swaps
``sys.stderr`` while its bars are drawn, and records written through the swap
print above the bars instead of through them.

One voice on the console: the libraries SAND drives (transformers, datasets,
TRL, torch, vLLM ...) speak there only at error level unless ``--log-level``
asks for info or debug; their records go to ``run.log`` whatever the level.
Their progress bars are off (:data:`QUIET_LIBRARY_ENV`, inherited by every
process a run starts), vLLM's records (its engine processes' too) go to ``run.log`` through its own logging
set-up file (:data:`VLLM_CONFIG_VAR`), what an engine process prints outside logging (its C++ warnings, its
load bar) goes to ``run.log`` too (:func:`children_output_to_run_log`), and the trainers log TRL's per-step
metrics as records (``run.log``) instead of printing them: what the console shows is SAND's own
progress and a line per stage.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sand_framework.errors import RunStopped

LEVELS: tuple[str, ...] = ("debug", "info", "warning", "error")
"""The levels ``--log-level`` accepts, most verbose first."""

DEFAULT_LEVEL = "warning"
"""The console's level unless told otherwise: warnings and errors, from SAND and plugins alike."""

LEVEL_VAR = "SAND_LOG_LEVEL"
"""Environment variable giving ``--log-level``'s value."""

RUN_LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

CHATTY_LIBRARIES: tuple[str, ...] = ("py4j", "httpx", "httpcore")
"""Libraries that log routine events at info (py4j: two lines per JVM gateway, and the Java environments start
one per worker; httpx/httpcore: one per request of the openai policy): kept to warnings unless the level is debug,
so that ``run.log`` stays readable."""


LIBRARIES: tuple[str, ...] = (
    "transformers", "datasets", "trl", "peft", "accelerate", "torch", "huggingface_hub", "vllm", "ray",
    "filelock", "urllib3", "fsspec", "matplotlib", "PIL", "py4j", "httpx", "httpcore", "openai",
    "textworld", "alfworld", "scienceworld", "textworld_express")
"""Top-level logger names of the libraries whose records below error stay off the console at the default level."""

QUIET_LIBRARY_ENV: dict[str, str] = {"HF_HUB_DISABLE_PROGRESS_BARS": "1",  # transformers reads the hub's switch
                                     "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
                                     "TQDM_DISABLE": "1"}  # bars no switch reaches (transformers' GGUF loader)
"""Set (unless the user set them) before any library is imported: their tqdm bars ("Loading weights",
"Truncating train dataset", "Converting and de-quantizing GGUF tensors") interleave with SAND's own progress
(rich, not tqdm) and fill ``run.log`` with carriage returns."""

LIBRARY_HANDLERS: tuple[str, ...] = ("transformers", "datasets")
"""Libraries that install their own stderr handler (transformers also stops propagation): see
:func:`adopt_library_loggers`."""


def adopt_library_loggers() -> None:
    """Route the records of :data:`LIBRARY_HANDLERS` through the root logger (console filter, ``run.log``)
    instead of their own stderr handlers. Only libraries already imported are touched (importing one costs
    seconds); the stages that import them call this after they do."""
    for name in LIBRARY_HANDLERS:
        module = sys.modules.get(f"{name}.utils.logging")
        if module is None:
            continue
        if hasattr(module, "disable_default_handler"):  # transformers; datasets keeps a plain handler (below)
            module.disable_default_handler()
        module.enable_propagation()
        logger = logging.getLogger(name)
        for handler in [h for h in logger.handlers if type(h) is logging.StreamHandler]:
            logger.removeHandler(handler)


class _OneVoice(logging.Filter):
    """On the console: a library's records (:data:`LIBRARIES`) only from error up, unless the console's level is
    info or debug."""

    def __init__(self, level: int):
        super().__init__()
        self.level = level

    def filter(self, record: logging.LogRecord) -> bool:
        if self.level <= logging.INFO or record.levelno >= logging.ERROR:
            return True
        return record.name.split(".", 1)[0] not in LIBRARIES


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is at the time (see the module docstring)."""

    @property
    def stream(self):  # type: ignore[override]
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:  # StreamHandler.__init__ assigns one; the live sys.stderr wins
        pass


def _about_a_stop(record: logging.LogRecord) -> bool:
    """A record a library logged about the interrupt that stops a run (py4j logs its KeyboardInterrupt with a
    traceback): the run's own line says what happened."""
    return bool(record.exc_info) and isinstance(record.exc_info[1], RunStopped)


class _QuietStops(logging.Filter):
    """On the console: drop records about a stop (:func:`_about_a_stop`); in ``run.log``: keep them, without the
    traceback."""

    def __init__(self, keep: bool):
        super().__init__()
        self.keep = keep

    def filter(self, record: logging.LogRecord) -> bool:
        if not _about_a_stop(record):
            return True
        if self.keep:
            record.exc_info, record.exc_text = None, None
        return self.keep


class _ConsoleFormatter(logging.Formatter):
    """``warning: message``, the way SAND's own messages read on the console."""

    def format(self, record: logging.LogRecord) -> str:
        return f"{record.levelname.lower()}: {super().format(record)}"


def configure(level: str = DEFAULT_LEVEL) -> None:
    """Send log records at ``level`` and above to stderr (replacing an earlier call's handler).

    The root logger passes info records on even when the console shows only
    warnings, so that ``run.log`` keeps them (debug ones too at ``debug``).
    """
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _StderrHandler)]:
        root.removeHandler(old)
    handler = _StderrHandler()
    handler.setLevel(level.upper())
    handler.setFormatter(_ConsoleFormatter("%(message)s"))
    handler.addFilter(_QuietStops(keep=False))
    handler.addFilter(_OneVoice(handler.level))
    root.addHandler(handler)
    for key, value in QUIET_LIBRARY_ENV.items():
        os.environ.setdefault(key, value)
    adopt_library_loggers()
    root.setLevel(min(logging.INFO, handler.level))
    for name in CHATTY_LIBRARIES:
        logging.getLogger(name).setLevel(logging.NOTSET if handler.level <= logging.DEBUG else logging.WARNING)
    logging.captureWarnings(True)


def console_level() -> str:
    """The level :func:`configure` set (``DEFAULT_LEVEL`` before any call): what child ``sand`` runs inherit."""
    handlers = [h for h in logging.getLogger().handlers if isinstance(h, _StderrHandler)]
    return logging.getLevelName(handlers[-1].level).lower() if handlers else DEFAULT_LEVEL


class _RunLogHandler(logging.FileHandler):
    """Appends to ``run.log``; a record it cannot write (full disk) is dropped without a word.

    logging's default is a traceback on stderr per failed record, and a full
    disk must end the run with its own one-line message (exit 6), not those.
    """

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 - logging's name
        pass


VLLM_CONFIG_VAR = "VLLM_LOGGING_CONFIG_PATH"
"""vLLM's logging set-up file: vLLM configures its logger itself, in the run's process and in every engine process
it starts (printing to stdout, not through the root logger), so a run points it at ``run.log`` this way."""


def _libraries_speak() -> bool:
    """The console level (info, debug) at which the libraries' own output stays on the console."""
    return console_level() in ("debug", "info")


def _route_vllm_to(path: Path) -> Path | None:
    """Have vLLM's records (every process) appended to ``path`` instead of printed, unless the console level is
    info or debug (the libraries then speak on the console) or the user set vLLM's logging up; returns the
    config file made (removed when the run ends)."""
    if _libraries_speak() or VLLM_CONFIG_VAR in os.environ \
            or os.environ.get("VLLM_CONFIGURE_LOGGING", "1") == "0":
        return None
    config = {"version": 1, "disable_existing_loggers": False,
              "formatters": {"sand": {"format": RUN_LOG_FORMAT}},
              "handlers": {"run_log": {"class": f"{__name__}._RunLogHandler", "filename": str(Path(path).resolve()),
                                       "mode": "a", "encoding": "utf-8", "formatter": "sand", "level": "INFO"}},
              "loggers": {"vllm": {"handlers": ["run_log"], "level": "INFO", "propagate": False}}}
    fd, name = tempfile.mkstemp(prefix="sand-vllm-logging-", suffix=".json")
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        json.dump(config, out)
    os.environ[VLLM_CONFIG_VAR] = name
    return Path(name)


_RUN_LOGS: list[Path] = []
"""The ``run.log`` of every :func:`run_log` block open, innermost last."""


@contextmanager
def children_output_to_run_log() -> Iterator[None]:
    """Processes started while the block runs (an inference engine's) write what they print into the open
    ``run.log``, for their whole life, instead of onto the console.

    An engine process prints outside :mod:`logging` (Triton's and torch's warnings, a C++ NUMA warning, vLLM's
    weight-loading bar, a crashed worker's traceback), and a child inherits its file descriptors 1 and 2 when it
    starts: so these point at ``run.log`` for the block, while this process's own ``sys.stdout``/``sys.stderr``
    (SAND's console, its progress bars) keep writing where they did. A no-op outside a run's log, or at
    ``--log-level info``/``debug``, where the libraries speak on the console.
    """
    if not _RUN_LOGS or _libraries_speak():
        yield
        return
    streams = {1: "stdout", 2: "stderr"}
    for name in streams.values():
        getattr(sys, name).flush()
    saved = {fd: os.dup(fd) for fd in streams}
    replaced = {}
    for fd, name in streams.items():  # this process's own writes keep their terminal (or file, or pipe)
        stream = getattr(sys, name)
        if _fileno(stream) == fd:
            replaced[name] = stream
            setattr(sys, name, open(saved[fd], "w", buffering=1, encoding=stream.encoding,  # noqa: SIM115
                                    errors=stream.errors, closefd=False))
    log_fd = os.open(_RUN_LOGS[-1], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        for fd in streams:
            os.dup2(log_fd, fd)
        yield
    finally:
        for fd in streams:
            os.dup2(saved[fd], fd)
        for name, stream in replaced.items():
            getattr(sys, name).flush()
            setattr(sys, name, stream)
        for fd in (log_fd, *saved.values()):
            os.close(fd)


def _fileno(stream) -> int | None:
    try:
        return stream.fileno()
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is an OSError and a ValueError
        return None


@contextmanager
def run_log(path: Path) -> Iterator[None]:
    """Append every record that reaches the root logger to ``path`` while the block runs (a run's ``run.log``).

    An exception that ends the block is written there too, with its traceback, so the run directory says why
    the run stopped; only the file gets it, the command prints its own one-line message.
    """
    adopt_library_loggers()
    vllm_config = _route_vllm_to(path)
    _RUN_LOGS.append(Path(path))
    handler = _RunLogHandler(path, mode="a", encoding="utf-8")
    handler.setFormatter(logging.Formatter(RUN_LOG_FORMAT))
    handler.addFilter(_QuietStops(keep=True))
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield
    except RunStopped as exc:  # a signal, not a failure: its line (what stopped it, how to go on), no traceback
        handler.handle(logging.LogRecord(__name__, logging.WARNING, __file__, 0, "%s", (exc,), None))
        raise
    except BaseException as exc:
        handler.handle(logging.LogRecord(__name__, logging.ERROR, __file__, 0, "the run stopped: %s: %s",
                                         (type(exc).__name__, exc), (type(exc), exc, exc.__traceback__)))
        raise
    finally:
        _RUN_LOGS.pop()
        root.removeHandler(handler)
        handler.close()
        if vllm_config is not None:
            os.environ.pop(VLLM_CONFIG_VAR, None)
            vllm_config.unlink(missing_ok=True)
