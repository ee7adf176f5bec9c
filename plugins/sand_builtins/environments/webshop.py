"""WebShop (Yao et al., 2022) as a SAND environment, on the ETO protocol.

The environment itself is upstream WebShop (``princeton-nlp/WebShop``): the
``web_agent_site`` package, its product catalogue, search index and the spaCy
model its reward function uses. None of it is on PyPI (the PyPI ``webshop``
distribution is an empty stub); install it as :data:`INSTALL_HINT` says. This
module is only the adapter, and it drives upstream's text environment
in-process exactly as ETO does::

    WebAgentTextEnv(observation_mode="text", human_goals=True).reset(session=i)

Task ids
    ``webshop_<i>``: goal number ``i`` of upstream's human-goal list (which
    upstream shuffles with ``random.seed(233)``), i.e. ETO's session index.
    The id means the same goal on any machine with the same WebShop data.

Splits (ETO's index lists, shipped in ``data/webshop/``, see PROVENANCE.md)
    ``train``  the 1,823 unique indices of ``train_indices.json`` (the file
               lists 4116 twice; ETO's SFT set has 1,823 trajectories);
    ``seen``   the 200 indices of ``test_indices.json`` (ETO's WebShop test
               set; the SAND paper reports it as the seen split);
    ``unseen`` empty: ETO/SAND have no unseen WebShop split. ``splits()``
               lists only train and seen.
    21 of the 200 test indices are also in the train list (an upstream ETO
    fact). ``exclude_test_from_train: true`` drops them from ``train``.

Actions and observations
    ``search[keywords]`` (only where the page has a search bar) and
    ``click[value]`` (value one of the page's clickables: buttons, product
    ids, option values; matched as upstream does, lowercased). Observations are upstream's
    ``text`` mode page (``[SEP]``-separated), unchanged, so trajectories
    imported from ETO's ``webshop_sft.json`` replay observation for
    observation. An invalid action changes nothing and returns the same page
    (upstream's behaviour), marked ``valid=False``; it still costs a step.

Reward
    Upstream's reward in [0, 1] when the agent clicks ``buy now`` (which ends
    the episode); 0 on every other step and when the 10-step cap is hit
    first. ``success`` means reward 1.0.

Expert
    WebShop has no per-goal expert; use ETO's trajectories
    (``sand data import-eto webshop_sft.json --env webshop``).

The adapter (:class:`WebShopEnv`) talks to any object with upstream's
text-env interface (``reset(session=)``, ``step``, ``get_available_actions``,
``observation``); the upstream object comes from its ``upstream_factory``
(default :func:`make_upstream_env`), so the adapter is testable without WebShop.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import re
from dataclasses import dataclass
from importlib import resources
from typing import Annotated, Any, Callable

from annotated_types import Ge, Interval

from sand_framework import hookimpl
from sand_framework.components.environment import MAX_EPISODE_STEPS
from sand_framework.components.text_environment import Outcome, TextEnvironment
from sand_framework.errors import EnvironmentUnavailable

TASK_PREFIX = "webshop_"
MAX_STEPS = 10
BUY_NOW = "buy now"

INSTALL_HINT = (
    "webshop needs upstream WebShop, which is not on PyPI (the PyPI 'webshop' package is an empty stub):\n"
    "  git clone https://github.com/princeton-nlp/WebShop && cd WebShop\n"
    "  ./setup.sh -d all        # installs its requirements, downloads the full product data (1.18M products)\n"
    "                           # and human goals, builds the search index (needs Java for pyserini)\n"
    "  python -m spacy download en_core_web_lg   # the reward model (setup.sh does this too)\n"
    "  pip install -e .          # or put the WebShop checkout on PYTHONPATH so `import web_agent_site` works\n"
    "Run SAND from a shell where `python -c 'import web_agent_site.envs'` succeeds. "
    "ETO's indices need the full data with human goals ('-d all'), not the 1k-product '-d small' set."
)

_ACTION_RE = re.compile(r"^\s*(search|click)\s*\[(.*)\]\s*$", re.IGNORECASE | re.DOTALL)


# --------------------------------------------------------------------------- splits


def _load_indices(name: str) -> list[int]:
    path = resources.files("sand_builtins.environments") / "data" / "webshop" / name
    return [int(i) for i in json.loads(path.read_text(encoding="utf-8"))]


def task_id(goal_index: int) -> str:
    return f"{TASK_PREFIX}{int(goal_index)}"


def goal_index(task: str) -> int:
    """``webshop_123`` -> 123; raise ValueError saying what is wrong."""
    if not isinstance(task, str) or not task.startswith(TASK_PREFIX) or not task[len(TASK_PREFIX):].isdigit():
        raise ValueError(f"bad webshop task id {task!r}: expected 'webshop_<goal index>', e.g. 'webshop_2853'")
    return int(task[len(TASK_PREFIX):])


# --------------------------------------------------------------------------- actions


@dataclass(frozen=True)
class ParsedAction:
    kind: str
    """``search`` or ``click``; empty when the text is not an action."""
    arg: str
    error: str = ""

    @property
    def ok(self) -> bool:
        return not self.error


def parse_action(action: Any) -> ParsedAction:
    """Parse ``search[...]`` / ``click[...]``. Never raises; ``error`` says why a text is not an action."""
    if not isinstance(action, str):
        return ParsedAction("", "", "not text")
    action = action.strip()
    if not action.isprintable():
        return ParsedAction("", "", "non-printable characters")
    m = _ACTION_RE.match(action)
    if m is None:
        return ParsedAction("", "", "expected search[keywords] or click[value]")
    kind, arg = m.group(1).lower(), m.group(2).strip()
    if not arg:
        return ParsedAction(kind, "", f"empty {kind}[]")
    return ParsedAction(kind, arg)


# --------------------------------------------------------------------------- upstream


_SERVERS: dict[tuple, Any] = {}
"""Upstream SimServers (product catalogue, search engine, goals) shared by all instances in a process.

Loading them takes minutes and gigabytes, so clones share one; each instance
gets its own browser and session prefix, so episodes never mix."""
_PREFIX = itertools.count()


def _import_upstream() -> Any:
    try:
        from web_agent_site.envs import WebAgentTextEnv
    except ImportError as exc:
        raise EnvironmentUnavailable(f"{INSTALL_HINT}\n(import failed: {exc})") from exc
    return WebAgentTextEnv


def make_upstream_env(num_products: int | None = None) -> Any:
    """Upstream's text env in ETO's configuration, sharing the loaded catalogue between instances."""
    cls = _import_upstream()
    key = (num_products,)
    kwargs: dict[str, Any] = {"observation_mode": "text", "human_goals": True,
                              "session_prefix": f"sand{next(_PREFIX)}_"}
    if num_products is not None:
        kwargs["num_products"] = num_products
    try:
        env = cls(server=_SERVERS.get(key), **kwargs)
    except Exception as exc:  # noqa: BLE001 - missing data files, search index or spaCy model
        raise EnvironmentUnavailable(
            f"webshop: upstream WebShop is importable but failed to start ({type(exc).__name__}: {exc}).\n"
            f"{INSTALL_HINT}"
        ) from exc
    _SERVERS.setdefault(key, env.server)
    return env


# --------------------------------------------------------------------------- environment


class WebShopEnv(TextEnvironment["WebShopEnv.Params"]):
    """Upstream WebShop's text environment with ETO's goal indices and step cap.

    Actions are checked against the page's own available actions before they
    are forwarded; the reward is non-zero only after a purchase.
    """

    name = "webshop"
    benchmark = "webshop"
    description = "WebShop online shopping (upstream web_agent_site, ETO splits); reward on purchase, 10 steps."

    @dataclass
    class Params:
        max_steps: Annotated[int, Interval(ge=1, le=MAX_EPISODE_STEPS)] = MAX_STEPS
        """Step cap per episode (ETO: 10), at most 1000; invalid actions count."""
        exclude_test_from_train: bool = False
        """Drop from ``train`` the 21 goals that ETO's train list shares with its test list."""
        num_products: Annotated[int, Ge(1)] | None = None
        """Upstream ``num_products`` (None = the whole catalogue, as ETO). Smaller values change the goals."""

    def __init__(self, params: Any = None, upstream_factory: Callable[[], Any] | None = None):
        super().__init__(params)
        self._factory = upstream_factory or (lambda: make_upstream_env(self.params.num_products))
        self._upstream: Any = None
        self._page = ""
        """The current page (upstream's ``observation``): what an invalid action shows again."""

    def _env(self) -> Any:
        if self._upstream is None:
            self._upstream = self._factory()
        return self._upstream

    def clone(self) -> "WebShopEnv":
        return type(self)(dataclasses.replace(self.params), upstream_factory=self._factory)

    def close(self) -> None:
        upstream, self._upstream, self.episode = self._upstream, None, None
        if upstream is not None and hasattr(upstream, "close"):
            upstream.close()

    # ------------------------------------------------------------ tasks

    def splits(self) -> list[str]:
        return ["train", "seen"]

    def tasks(self, split: str) -> list[str]:
        if split == "seen":
            return [task_id(i) for i in _load_indices("test_indices.json")]
        if split == "train":
            test = set(_load_indices("test_indices.json")) if self.params.exclude_test_from_train else set()
            out, seen = [], set()
            for i in _load_indices("train_indices.json"):
                if i not in seen and i not in test:
                    seen.add(i)
                    out.append(task_id(i))
            return out
        if split == "unseen":
            return []  # ETO/SAND evaluate WebShop on one test set only
        raise ValueError(f"webshop: unknown split {split!r} (known: train, seen; unseen is empty)")

    def max_steps(self, task: str) -> int:
        goal_index(task)
        return self.params.max_steps

    def task_id_from_eto(self, eto_id: str, trajectory: Any = None) -> str:
        """ETO's WebShop ids are the goal index (``"4116"``)."""
        s = str(eto_id).strip()
        if s.startswith(TASK_PREFIX):
            s = s[len(TASK_PREFIX):]
        if not s.isdigit():
            raise ValueError(f"webshop: ETO id {eto_id!r} is not a goal index")
        return task_id(int(s))

    # ------------------------------------------------------------ agent

    def instruction(self) -> str:
        return (
            "You are shopping on a web store. Read the instruction on the page and buy the item that matches it best.\n"
            "Each turn you see the current page (fields separated by [SEP]) and answer with one action:\n"
            "- search[keywords]  (only on a page with a search bar)\n"
            "- click[value]      (value must be a button, product id or option shown on the page)\n"
            "click[Buy Now] on an item page ends the episode and is scored against the instruction. "
            "An invalid action does nothing but still uses a step; "
            f"you have at most {self.params.max_steps} steps.\n"
            "Reply in exactly this format:\n"
            "Thought: <think briefly about what to do next>\n"
            "Action: <one action>"
        )

    def start(self, task: str) -> str:
        goal = goal_index(task)
        upstream = self._env()
        upstream.reset(session=goal)
        self._page = str(upstream.observation)
        return self._page

    def available(self) -> tuple[bool, list[str]]:
        """(has search bar, clickables) of the current page, as upstream reports them."""
        info = self._upstream.get_available_actions()
        return bool(info.get("has_search_bar")), [str(c) for c in info.get("clickables", [])]

    def check(self, parsed: ParsedAction) -> str:
        """Why this action cannot run on the current page ('' when it can)."""
        if not parsed.ok:
            return parsed.error
        has_search, clickables = self.available()
        if parsed.kind == "search":
            return "" if has_search else "no search bar on this page"
        # Exactly upstream's test: the lowercased value must be a clickable key. (Upstream keys option
        # values unlowercased, so an option with capitals is never clickable there either.)
        value = parsed.arg.lower()
        if value == "search" or value not in set(clickables):
            return f"{parsed.arg!r} is not clickable here"
        return ""

    def act(self, action: str) -> Outcome:
        parsed = parse_action(action)
        if self.check(parsed):
            return Outcome(self._page, valid=False)  # upstream's behaviour: nothing changes
        obs, reward, done, _ = self._upstream.step(f"{parsed.kind}[{parsed.arg}]")
        self._page = str(obs)
        if not done:
            return Outcome(self._page, True)
        # Upstream ends an episode only on "buy now"; the reward is the purchase's score.
        if parsed.kind == "click" and parsed.arg.lower() == BUY_NOW:
            reward = min(1.0, max(0.0, float(reward or 0.0)))
            return Outcome(self._page, True, reward, reward >= 1.0, ends=True)
        return Outcome(self._page, True, ends=True)

    def expert_actions(self, task: str) -> list[str]:
        raise NotImplementedError(
            "webshop has no built-in expert; import ETO's trajectories instead: "
            "sand data import-eto webshop_sft.json --env webshop -o webshop_expert.json"
        )


@hookimpl
def sand_register_environments(register):
    register(WebShopEnv)
