"""cpu_threads: one thread per core that other processes leave free, the explicit number winning."""

from __future__ import annotations

import os

import pytest

from sand_framework import cpu_threads as ct

AUTOGROUPS = ct._autogroups  # the real check, before the fixture fakes it


def stat(*cpus: tuple[int, int, int, int]) -> str:
    """A /proc/stat text: per CPU (user, nice, system, idle) ticks; iowait, irq, softirq, steal 0."""
    lines = ["cpu  0 0 0 0 0 0 0 0 0 0"]
    lines += [f"cpu{i} {u} {n} {s} {idle} 0 0 0 0 0 0" for i, (u, n, s, idle) in enumerate(cpus)]
    return "\n".join(lines + ["intr 1 2 3", "ctxt 99"]) + "\n"


class FakeStat:
    """/proc/stat that advances between the two samples of one window."""

    def __init__(self, *texts: str):
        self.texts = list(texts)

    def read_text(self) -> str:
        return self.texts.pop(0)


@pytest.fixture
def machine(monkeypatch):
    """Two allowed cores, a one-second window (100 ticks per core), this process using ``own`` CPU seconds."""
    clock = iter([0.0, 1.0])
    monkeypatch.setattr(ct.time, "sleep", lambda s: None)
    monkeypatch.setattr(ct.time, "monotonic", lambda: next(clock))
    monkeypatch.setattr(ct.os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setattr(ct.os, "sysconf", lambda name: 100)
    monkeypatch.setattr(ct.os, "getpriority", lambda which, who: 0)
    monkeypatch.setattr(ct, "_autogroups", lambda: False)

    def load(after: tuple[tuple[int, int, int, int], ...], own: float = 0.0):
        before = tuple((0, 0, 0, 0) for _ in after)
        monkeypatch.setattr(ct, "PROC_STAT", FakeStat(stat(*before), stat(*after)))
        spent = iter([0.0, own])
        monkeypatch.setattr(ct, "_own_seconds", lambda: next(spent))

    return load


def test_idle_machine_gets_every_allowed_core(machine):
    machine(((0, 0, 0, 100), (1, 0, 1, 98)))
    assert ct.cpu_threads() == 2


def test_one_busy_core_leaves_one_thread(machine):
    machine(((95, 0, 5, 0), (2, 0, 0, 98)))  # another process keeps cpu0 busy
    assert ct.cpu_threads() == 1


def test_both_cores_busy_still_one_thread(machine):
    machine(((100, 0, 0, 0), (90, 0, 10, 0)))
    assert ct.cpu_threads() == 1


def test_own_work_does_not_count_as_busy(machine):
    machine(((100, 0, 0, 0), (0, 0, 0, 100)), own=1.0)  # the busy core is this process itself
    assert ct.cpu_threads() == 2


def test_niced_work_yields_unless_we_are_niced(machine, monkeypatch):
    machine(((0, 100, 0, 0), (0, 0, 0, 100)))  # a niced process on cpu0
    assert ct.cpu_threads() == 2
    machine(((0, 100, 0, 0), (0, 0, 0, 100)))
    monkeypatch.setattr(ct.os, "getpriority", lambda which, who: 15)
    monkeypatch.setattr(ct.time, "monotonic", iter([0.0, 1.0]).__next__)
    assert ct.cpu_threads() == 1


@pytest.mark.parametrize("flag, threads", [("1\n", 1), ("0\n", 2)])
def test_niced_work_of_another_session_competes_under_autogroups(machine, monkeypatch, tmp_path, flag, threads):
    machine(((0, 100, 0, 0), (0, 0, 0, 100)))  # a niced process on cpu0; this one is not niced
    (tmp_path / "sched_autogroup_enabled").write_text(flag)
    monkeypatch.setattr(ct, "AUTOGROUP", tmp_path / "sched_autogroup_enabled")
    monkeypatch.setattr(ct, "_autogroups", AUTOGROUPS)
    assert ct.cpu_threads() == threads


def test_only_the_allowed_cores_are_counted(machine, monkeypatch):
    machine(((100, 0, 0, 0), (0, 0, 0, 100), (0, 0, 0, 100)))  # cpu0 busy, but this process may use 1 and 2
    monkeypatch.setattr(ct.os, "sched_getaffinity", lambda pid: {1, 2})
    assert ct.cpu_threads() == 2


def test_explicit_threads_win(machine):
    machine(((100, 0, 0, 0), (100, 0, 0, 0)))
    assert ct.cpu_threads(3) == 3


def test_unreadable_proc_stat_counts_every_allowed_core_free(monkeypatch, tmp_path):
    monkeypatch.setattr(ct, "PROC_STAT", tmp_path / "missing")
    assert ct.cpu_threads() == len(os.sched_getaffinity(0))


def test_real_machine_answer_is_within_the_affinity():
    assert 1 <= ct.cpu_threads() <= len(os.sched_getaffinity(0))
