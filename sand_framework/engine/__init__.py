"""The SAND loop (Algorithm 1): resumable pipeline stages, the synthesis pass, expert trajectories and
the per-task evaluation loop. Above it: the application layer (:mod:`sand_framework.app`); below it: the
public rollout layer (:mod:`sand_framework.rollout`) and the core."""
