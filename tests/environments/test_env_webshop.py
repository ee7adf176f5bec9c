"""The WebShop adapter, without WebShop.

Upstream WebShop (product data, search index, spaCy model) is not installable
here, so the adapter logic is tested against ``RecordedWebShop``: a stand-in
for upstream's ``WebAgentTextEnv`` that replays one recorded session (start
page -> search results -> item page -> purchase) through the same interface
(``reset(session=)``, ``step``, ``get_available_actions``, ``observation``)
and upstream's rules (lowercased click values, invalid actions change
nothing, episode ends only on "buy now"). It exists only in this test.
"""

from __future__ import annotations

import sys

import pytest
from sand_builtins.environments import webshop as ws

from sand_framework.components.text_environment import EPISODE_OVER
from sand_framework.errors import EnvironmentUnavailable
from sand_framework.testing.conformance import check_environment

GOAL = "i need a long clip-in hair extension which is natural looking, and price lower than 40.00 dollars"
START = f"WebShop [SEP] Instruction: [SEP] {GOAL} [SEP] Search"
RESULTS = (
    "Back to Search [SEP] Page 1 (Total results: 50) [SEP] Next > [SEP] B09C337K8S [SEP] "
    "Long Clip In Hair Extension Natural Wavy 24 Inch [SEP] $19.99 [SEP] B0972P8QQL [SEP] "
    "Synthetic Ponytail Extension Black [SEP] $29.99"
)
ITEM = (
    "Back to Search [SEP] < Prev [SEP] color [SEP] natural [SEP] Jet Black [SEP] size [SEP] 24 inch [SEP] "
    "Long Clip In Hair Extension Natural Wavy 24 Inch [SEP] Price: $19.99 [SEP] Rating: N.A. [SEP] "
    "Description [SEP] Features [SEP] Reviews [SEP] Buy Now"
)
DONE = ("Thank you for shopping with us! [SEP] Your code: [SEP] None [SEP] (Paste it in your MTurk interface.) "
        "[SEP] Purchased [SEP] asin [SEP] B09C337K8S [SEP] options [SEP] {\"color\": \"natural\"}")
REWARD = 0.75

PAGES = {
    "start": (START, True, ["search"]),
    "results": (RESULTS, False, ["back to search", "next >", "b09c337k8s", "b0972p8qql"]),
    # upstream keys buttons lowercased but option values as written ("Jet Black" is never clickable)
    "item": (ITEM, False, ["back to search", "< prev", "description", "features", "reviews", "buy now",
                           "natural", "Jet Black", "24 inch"]),
    "done": (DONE, False, []),
}


class RecordedWebShop:
    """Replays the recorded session with upstream WebAgentTextEnv's interface and rules."""

    def __init__(self):
        self.page = "start"
        self.sessions: list = []
        self.forwarded: list[str] = []
        self.closed = False

    @property
    def observation(self) -> str:
        return PAGES[self.page][0]

    def get_available_actions(self) -> dict:
        _, bar, clickables = PAGES[self.page]
        return {"has_search_bar": bar, "clickables": list(clickables)}

    def reset(self, session=None):
        self.sessions.append(session)
        self.page = "start"
        return self.observation, None

    def step(self, action):
        self.forwarded.append(action)
        name, _, arg = action.partition("[")
        arg = arg[:-1].lower()
        _, bar, clickables = PAGES[self.page]
        reward, done = 0.0, False
        if name == "search" and bar and arg:
            self.page = "results"
        elif name == "click" and arg in clickables and arg != "search":
            if arg == "buy now":
                self.page, reward, done = "done", REWARD, True
            elif arg == "back to search":
                self.page = "start"
            elif arg == "< prev":
                self.page = "results"
            elif arg.startswith("b0") or self.page == "item":
                self.page = "item"
        return self.observation, reward, done, None

    def close(self):
        self.closed = True


def make_env(**params) -> tuple[ws.WebShopEnv, list[RecordedWebShop]]:
    made: list[RecordedWebShop] = []

    def factory():
        made.append(RecordedWebShop())
        return made[-1]

    return ws.WebShopEnv(ws.WebShopEnv.Params(**params), upstream_factory=factory), made


BUY_PATH = ["search[long clip-in hair extension natural]", "click[B09C337K8S]", "click[natural]", "click[Buy Now]"]


# ----------------------------------------------------------------------------- parsing


@pytest.mark.parametrize("text,kind,arg", [
    ("search[hair extension]", "search", "hair extension"),
    ("  click[Buy Now] ", "click", "Buy Now"),
    ("CLICK[b09c337k8s]", "click", "b09c337k8s"),
    ("click [< Prev]", "click", "< Prev"),
    ("search[ 3 ounce bottle [travel] ]", "search", "3 ounce bottle [travel]"),
])
def test_parse_valid(text, kind, arg):
    p = ws.parse_action(text)
    assert p.ok and (p.kind, p.arg) == (kind, arg)


@pytest.mark.parametrize("text", ["", "buy it", "click[]", "search[   ]", "click[a", "go to click[x] now",
                                  "x" * 5000, "\x00\n\t}{", "Action: click[x]", None, 3])
def test_parse_invalid(text):
    p = ws.parse_action(text)
    assert not p.ok and p.error


# ----------------------------------------------------------------------------- episodes


def test_recorded_purchase_reward_only_on_buy():
    env, made = make_env()
    assert env.reset("webshop_2853") == START
    assert made[0].sessions == [2853]  # ETO: reset(session=<goal index>) with an int
    results = [env.step(a) for a in BUY_PATH]
    assert [r.observation for r in results] == [RESULTS, ITEM, ITEM, DONE]
    assert [r.reward for r in results] == [0.0, 0.0, 0.0, REWARD]
    assert [r.done for r in results] == [False, False, False, True]
    assert all(r.valid for r in results)
    assert not results[-1].success  # success = a perfect purchase (reward 1)
    # forwarded in canonical form; upstream lowercases the value itself
    assert made[0].forwarded == ["search[long clip-in hair extension natural]", "click[B09C337K8S]",
                                 "click[natural]", "click[Buy Now]"]
    after = env.step("click[back to search]")
    assert after.done and not after.valid and after.observation == EPISODE_OVER and after.reward == REWARD


def test_invalid_actions_change_nothing_and_are_not_forwarded():
    env, made = make_env()
    env.reset("webshop_2853")
    bad = env.step("click[buy now]")  # not on the start page
    assert (bad.valid, bad.observation, bad.reward, bad.done) == (False, START, 0.0, False)
    assert not env.step("click[search]").valid  # upstream never clicks the search button
    env.step("search[hair]")
    assert not env.step("search[again]").valid  # results page has no search bar
    assert not env.step("click[B00000000]").valid  # not on this page
    env.step("click[b09c337k8s]")
    r = env.step("click[Jet Black]")  # upstream's capitalised option key: not clickable there either
    assert not r.valid and r.observation == ITEM
    assert not env.step("I think I should buy it").valid
    assert made[0].forwarded == ["search[hair]", "click[b09c337k8s]"]


def test_step_cap_10_counts_invalid_actions_and_gives_no_reward():
    env, _ = make_env()
    assert env.max_steps("webshop_2853") == 10
    env.reset("webshop_2853")
    env.step("search[hair]")
    env.step("click[b09c337k8s]")
    out = [env.step("click[description]" if i % 2 else "nonsense") for i in range(8)]
    assert [r.done for r in out] == [False] * 7 + [True]
    assert out[-1].reward == 0.0 and not out[-1].success
    late = env.step("click[buy now]")
    assert late.done and not late.valid and late.reward == 0.0


def test_buy_on_the_last_allowed_step_still_counts():
    env, _ = make_env(max_steps=4)
    env.reset("webshop_1")
    res = [env.step(a) for a in BUY_PATH]
    assert res[-1].done and res[-1].reward == REWARD


def test_reset_starts_a_fresh_episode_and_replay_matches():
    env, made = make_env()
    env.reset("webshop_7")
    [env.step(a) for a in BUY_PATH]
    assert env.reset("webshop_7") == START
    assert env.step("search[x]").reward == 0.0
    out = env.replay("webshop_7", BUY_PATH, expected=[RESULTS, ITEM, ITEM, DONE])
    assert out[-1].reward == REWARD
    assert len(made) == 1  # one upstream object per instance, reused across resets


def test_conformance_without_expert():
    env, _ = make_env()
    assert check_environment(env, split_tasks={"seen": ["webshop_2853", "webshop_5934"]}) == []


def test_clone_has_its_own_upstream_session():
    env, made = make_env()
    other = env.clone()
    env.reset("webshop_1")
    other.reset("webshop_1")
    env.step("search[hair]")
    assert other.step("click[buy now]").valid is False  # the clone is still on the start page
    assert len(made) == 2
    env.close()
    assert made[0].closed


def test_step_before_reset():
    env, _ = make_env()
    with pytest.raises(RuntimeError, match="before reset"):
        env.step("search[x]")


# ----------------------------------------------------------------------------- tasks and splits


def test_splits_follow_eto():
    env, _ = make_env()
    seen, train = env.tasks("seen"), env.tasks("train")
    assert len(seen) == 200 and len(set(seen)) == 200 and seen[0] == "webshop_2853"
    assert len(train) == 1823 and train.count("webshop_4116") == 1
    assert len(set(seen) & set(train)) == 21  # ETO's own overlap, kept by default
    assert env.tasks("unseen") == [] and env.splits() == ["train", "seen"]
    strict, _ = make_env(exclude_test_from_train=True)
    assert len(strict.tasks("train")) == 1802 and not set(strict.tasks("train")) & set(seen)
    with pytest.raises(ValueError, match="unknown split"):
        env.tasks("test")


@pytest.mark.parametrize("bad", ["2853", "webshop_", "webshop_x1", "alfworld_3", ""])
def test_bad_task_ids(bad):
    env, _ = make_env()
    with pytest.raises(ValueError, match="webshop"):
        env.reset(bad)


def test_eto_ids():
    env, _ = make_env()
    assert env.task_id_from_eto("4116") == "webshop_4116"
    assert env.task_id_from_eto("webshop_12") == "webshop_12"
    with pytest.raises(ValueError):
        env.task_id_from_eto("abc")


def test_no_expert_points_to_eto_import():
    env, _ = make_env()
    with pytest.raises(NotImplementedError, match="import-eto"):
        env.expert_actions("webshop_2853")


# ----------------------------------------------------------------------------- installation


def test_missing_install_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "web_agent_site", None)
    monkeypatch.setitem(sys.modules, "web_agent_site.envs", None)
    env = ws.WebShopEnv()  # constructing is free; the upstream env loads on first reset
    with pytest.raises(EnvironmentUnavailable) as info:
        env.reset("webshop_2853")
    msg = str(info.value)
    for needed in ("princeton-nlp/WebShop", "setup.sh", "-d all", "en_core_web_lg", "web_agent_site", "empty stub"):
        assert needed in msg
    assert info.value.exit_code == 4


def test_registered_as_builtin(registries):
    assert registries["environment"].get("webshop") is ws.WebShopEnv
