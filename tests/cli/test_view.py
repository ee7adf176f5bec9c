"""`sand view`: the site built from a real smoke run, a `sand eval` folder and a sweep folder, clicked through in
headless Chromium (Debian's chromium + chromium-driver, driven by selenium).

One real smoke run (the tiny model, with the plugin test kit's ``expert_mix`` sampler so that steps are really
deliberated: rollouts, critiques and a synthesized thought) is shared by the module. Browser tests skip, with
the reason, where selenium or the browser is missing; the site's own checks run everywhere. Screenshots are kept
in ``$SAND_TEST_ARTIFACTS`` (default: pytest's tmp dir, printed by the test).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import urllib.request
from pathlib import Path

import pytest
import yaml
from sand_cli import SAND, sand

from sand_framework.store import RunLayout, UnitLog
from sand_framework.view import build_site

DELIBERATE = ["plugins.modules=[sand_framework.testing.detectors]", "sampler=expert_mix", "sampler.n=4",
              "synthesizer.on_failure=template", "--allow-recipe-plugins"]
"""The tiny model's syntheses never pass the check: the template opt-in gives the viewer deliberated steps to show
(the paper's rule, failed steps kept apart, is held by test_a_failed_synthesis_is_shown_and_not_counted)."""
HOSTILE = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("view-runs") / "smoke"
    sand("run", "smoke", *DELIBERATE, "--run-dir", str(run_dir))
    return run_dir


@pytest.fixture(scope="module")
def site(run, tmp_path_factory):
    out = tmp_path_factory.mktemp("view-site") / "site"
    return build_site(run, out)


def test_a_failed_synthesis_is_shown_and_not_counted():
    """A step whose synthesis failed is in the unit's ``failed`` list: the viewer shows it (marked failed, the
    expert's thought kept) and counts it as failed, not as deliberated."""
    from sand_framework.view.units import synthesis_unit

    step = {"thought": "The coin is east.", "action": "move east", "observation": "You win."}
    record = {"step_index": 0, "candidates": [{"action": "move east", "count": 1}, {"action": "move west", "count": 1}],
              "rollouts": [], "critiques": [], "synthesis": {"thought": "", "status": "failed", "attempts": 2},
              "expert_thought": "The coin is east."}
    unit = {"trajectory": {"task_id": "t", "steps": [step], "success": True, "reward": 1.0}, "records": [],
            "failed": [record], "stats": {"steps": 1, "deliberated": 0, "synthesis_failed": 1}}
    chunk, row = synthesis_unit("t", unit, None, 2, "deliberation")
    assert chunk["records"]["0"]["failed"] is True and "failed" not in chunk["extra"]
    assert row[2:4] == [0, 1]  # deliberated 0, failed or fallback 1
    generic, row = synthesis_unit("t", unit, None, 2)  # the same keys from a method that declares no shape
    assert generic["shape"] == "generic" and generic["data"] == unit and row[-1] == "generic"


def test_the_viewer_asks_each_method_for_its_unit_shape():
    """Issue 38: SAND declares the deliberation shape, the others (and a method this machine lacks) are generic."""
    from sand_framework.view.units import unit_shapes

    shapes = unit_shapes()
    assert shapes["sand"] == "deliberation"
    assert {shapes[m] for m in ("rft", "eto", "ipr", "pairs_file")} == {"generic"}


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory) -> Path:
    folder = Path(os.environ.get("SAND_TEST_ARTIFACTS") or tmp_path_factory.mktemp("view-artifacts"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture(scope="module")
def browser():
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (extra `test`)")
    from selenium.webdriver.chrome.service import Service

    driver_path = shutil.which("chromedriver") or "/usr/bin/chromedriver"
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not Path(driver_path).exists() or not chromium:
        pytest.skip("no headless Chromium: install Debian's chromium and chromium-driver "
                    "(scripts/setup.sh --with test does)")
    opts = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1366,850"):
        opts.add_argument(arg)
    opts.binary_location = chromium
    driver = webdriver.Chrome(service=Service(driver_path), options=opts)
    yield driver
    driver.quit()


def open_site(driver, index: Path, fragment: str = "") -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(index.resolve().as_uri() + fragment)
    WebDriverWait(driver, 10).until(lambda d: d.execute_script("return document.body.dataset.ready === '1'"))


def go(driver, fragment: str, loaded: str | None = None) -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    driver.execute_script("location.hash = arguments[0]", fragment)
    if loaded:
        WebDriverWait(driver, 10).until(
            lambda d: d.execute_script("return document.body.dataset.loaded === arguments[0]", loaded))


def css(driver, selector):
    from selenium.webdriver.common.by import By

    return driver.find_elements(By.CSS_SELECTOR, selector)


def visible(driver, selector) -> list:
    return [e for e in css(driver, selector) if e.is_displayed()]


def units(run: Path) -> list[dict]:
    return [json.loads(line)["data"] for line in (run / RunLayout.synthesis_units(1)).read_text().splitlines()]


# -- the site's files --------------------------------------------------------------------------------------------


def test_site_is_self_contained_and_lazy(run, site):
    out = site["index"].parent
    html = site["index"].read_text()
    assert "SAND view" in html and "static/view.js" in html and "data/index.js" in html
    for path in [site["index"], *out.glob("static/*")]:  # nothing from the network: no CDN, no web fonts
        text = path.read_text()
        assert "http://" not in text and "https://" not in text and "@import" not in text and "url(" not in text, path
    n_units = len(units(run))
    assert len(list((out / "data" / "s0").glob("*.js"))) == n_units  # one data file per trajectory
    index = (out / "data" / "index.js").read_text()
    assert index.startswith("SAND.index(") and "<" not in index
    assert "candidates" not in index  # per-step detail lives in the chunks, loaded on demand
    chunk = json.loads((out / "data" / "s0" / "0.js").read_text()[len('SAND.chunk("s0/0",'):-3])
    assert chunk["shape"] == "sand" and chunk["records"]
    target = chunk["target"]  # rendered with the tokenizer saved beside weights/iter1/final, loss spans marked
    assert target["spans"] and target["trained"] > 0 and {m for _, m in target["spans"]} >= {0, 1}
    assert "".join(t for t, m in target["spans"] if m == 1).count("Action:") == len(chunk["trajectory"]["steps"])
    assert (out / "figures" / "results.png").is_file()
    assert site["open_bytes"] < 200_000


def test_report_links_the_view(run, tmp_path):
    from sand_framework.report import build_report

    md = build_report([run], tmp_path / "report").read_text()
    assert f"sand view {run}" in md


# -- in a browser ------------------------------------------------------------------------------------------------


def test_browse_a_deliberated_step(run, site, browser, artifacts):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select

    open_site(browser, site["index"])
    assert visible(browser, "#tab-overview h2") and visible(browser, "figure img")
    browser.find_element(By.CSS_SELECTOR, '#tabs a[data-tab="synth"]').click()
    rows = visible(browser, "#synth-list tr.row")
    records = [u for u in units(run) if u["records"]]
    assert len(rows) == len(units(run)) and 0 < len(records) < len(rows)
    Select(browser.find_element(By.ID, "s-delib")).select_by_value("yes")  # the filter narrows the list
    assert len(visible(browser, "#synth-list tr.row")) == len(records)
    Select(browser.find_element(By.ID, "s-delib")).select_by_value("no")
    assert len(visible(browser, "#synth-list tr.row")) == len(rows) - len(records)
    Select(browser.find_element(By.ID, "s-delib")).select_by_value("yes")
    visible(browser, "#synth-list tr.row a")[0].click()
    first = next(i for i, u in enumerate(units(run)) if u["records"])
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(browser, 10).until(lambda d: d.execute_script("return document.body.dataset.loaded") == f"s0/{first}")
    rec = units(run)[first]["records"][0]
    step = browser.find_element(By.ID, f"step-{rec['step_index']}")
    step.find_element(By.CSS_SELECTOR, "a.stephead").click()
    assert browser.current_url.endswith(f"#synth/s0/{first}/{rec['step_index']}")  # a deep link to the step
    cands = [e for e in step.find_elements(By.CSS_SELECTOR, "tr.candidate") if e.is_displayed()]
    assert len(cands) == len(rec["candidates"]) >= 2
    assert any("expert" in c.text for c in cands)
    assert [e for e in step.find_elements(By.CSS_SELECTOR, ".rollout") if e.is_displayed()]
    assert rec["rollouts"][0]["steps"][0]["observation"][:40] in step.text
    assert [e for e in step.find_elements(By.CSS_SELECTOR, ".critique") if e.is_displayed()]
    delib = step.find_element(By.CSS_SELECTOR, ".deliberation .text")
    assert delib.is_displayed() and delib.text == rec["synthesis"]["thought"]
    assert "fallback" in step.text and "tokens" in step.text
    assert visible(browser, "#target .tok.m1")  # the training target with its loss-masked spans
    browser.save_screenshot(str(artifacts / "view-step.png"))
    # keys: Esc back to the list, j/k move, Enter opens; a deep link opens the step directly
    browser.find_element(By.TAG_NAME, "body").send_keys(Keys.ESCAPE)
    assert visible(browser, "#synth-list tr.row") and not visible(browser, "#synth-detail")
    open_site(browser, site["index"], f"#synth/s0/{first}/{rec['step_index']}")
    WebDriverWait(browser, 10).until(lambda d: d.execute_script("return document.body.dataset.loaded") == f"s0/{first}")
    assert "open" in browser.find_element(By.ID, f"step-{rec['step_index']}").get_attribute("class")
    browser.find_element(By.TAG_NAME, "body").send_keys(Keys.ESCAPE)
    browser.find_element(By.TAG_NAME, "body").send_keys(Keys.ENTER)
    assert "#synth/s0/" in browser.current_url
    open_site(browser, site["index"], "#overview")
    browser.save_screenshot(str(artifacts / "view-overview.png"))
    print(f"screenshots in {artifacts}")


def test_evaluation_side_by_side(run, site, browser, artifacts):
    from selenium.webdriver.common.by import By

    open_site(browser, site["index"], "#eval")
    heads = [e.text for e in css(browser, "#eval-list thead th")]
    assert "sft" in heads and "final" in heads
    rows = visible(browser, "#eval-list tr.row")
    assert len(rows) == 4  # 2 seen + 2 unseen tasks (eval.limit=2)
    browser.find_element(By.ID, "e-differ").click()  # tiny models: both fail the same way, so nothing differs
    differ = len(visible(browser, "#eval-list tr.row"))
    assert differ <= len(rows)
    browser.find_element(By.ID, "e-differ").click()
    visible(browser, "#eval-list tr.row")[0].click()  # the list was redrawn
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(browser, 10).until(lambda d: d.execute_script("return document.body.dataset.loaded") == "e/0")
    episodes = visible(browser, "#eval-detail .episode")
    assert [e.find_element(By.TAG_NAME, "h4").text for e in episodes] == ["sft", "final"]
    assert all("reward" in e.text and "steps" in e.text for e in episodes)
    browser.save_screenshot(str(artifacts / "view-eval.png"))


def test_hostile_strings_stay_inert(run, browser, tmp_path, artifacts):
    """Model and environment text holding markup is shown as text, in the page and in the server-side overview."""
    copy = tmp_path / "hostile"
    shutil.copytree(run, copy, ignore=shutil.ignore_patterns("weights"))
    log_path = copy / RunLayout.synthesis_units(1)
    old = UnitLog(log_path)
    log_path.unlink()
    new = UnitLog(log_path)
    for unit, data in old.records.items():
        for rec in data["records"]:
            rec["rollouts"][0]["steps"][0]["observation"] = HOSTILE
            rec["critiques"][0]["text"] = HOSTILE
            rec["synthesis"]["thought"] = HOSTILE
        data["trajectory"]["steps"][0]["observation"] = HOSTILE
        data["trajectory"]["task_id"] = HOSTILE
        new.append(unit, data)
    eval_log = next((copy / "eval").rglob(f"*{RunLayout.UNITS}"))
    lines = [json.loads(x) for x in eval_log.read_text().splitlines()]
    eval_log.unlink()
    ev = UnitLog(eval_log)
    for rec in lines:
        rec["data"]["trajectory"]["steps"][0]["observation"] = HOSTILE
        rec["data"]["trajectory"]["steps"][0]["thought"] = HOSTILE
        ev.append(rec["unit"], rec["data"])
    recipe = yaml.safe_load((copy / RunLayout.RECIPE).read_text())
    recipe["run"]["name"] = HOSTILE  # reaches the Jinja2-rendered overview
    (copy / RunLayout.RECIPE).write_text(yaml.safe_dump(recipe))
    info = build_site(copy, tmp_path / "site")
    html = info["index"].read_text()
    assert "<script>window" not in html and "<img src=x" not in html and "&lt;script&gt;" in html
    assert any("No tokenizer" in n for n in info["notes"])  # weights were not copied: said so, in the page too
    from selenium.webdriver.common.by import By

    open_site(browser, info["index"])
    assert HOSTILE in browser.find_element(By.TAG_NAME, "h1").text
    first = next(i for i, u in enumerate(old.records.values()) if u["records"])
    step = next(u for u in old.records.values() if u["records"])["records"][0]["step_index"]
    go(browser, f"#synth/s0/{first}/{step}", f"s0/{first}")
    text = browser.find_element(By.ID, "synth-detail").text
    assert text.count(HOSTILE) >= 4 and "No tokenizer" in text
    go(browser, "#eval")
    go(browser, "#eval/0", "e/0")
    assert HOSTILE in browser.find_element(By.ID, "eval-detail").text
    browser.save_screenshot(str(artifacts / "view-hostile.png"))
    assert browser.execute_script("return window.__pwned") is None
    assert not [e for e in css(browser, "img") if e.get_attribute("src").endswith("/x")]
    assert not css(browser, "#tab-synth script, #tab-eval script")


def test_a_sand_eval_folder(run, browser, tmp_path):
    out = tmp_path / "ev"
    sand("eval", f"{run}:final", "--split", "seen", "--limit", "1", "-o", str(out), "--label", "sand")
    info = build_site(out, out / "view")
    assert info["kind"] == "eval" and info["index"] == out / "view" / "index.html"
    open_site(browser, info["index"])
    from selenium.webdriver.common.by import By

    assert "Evaluated models (eval.json)" in browser.find_element(By.ID, "tab-overview").text
    go(browser, "#eval")
    (row,) = visible(browser, "#eval-list tr.row")
    row.click()
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(browser, 10).until(lambda d: d.execute_script("return document.body.dataset.loaded") == "e/0")
    (episode,) = visible(browser, "#eval-detail .episode")
    assert episode.find_element(By.TAG_NAME, "h4").text == "sand" and "reward" in episode.text
    go(browser, "#synth")
    assert "no synthesis" in browser.find_element(By.ID, "synth-list").text


def test_a_sweep_folder(run, browser, tmp_path, artifacts):
    out = tmp_path / "sweep"
    for arm in ("sand", "control"):  # the sweep layout OUT/<arm>/seed<k>, from the real run
        shutil.copytree(run, out / arm / "seed0", ignore=shutil.ignore_patterns("weights"))
    spec = tmp_path / "sweep.yaml"
    spec.write_text(yaml.safe_dump({
        "name": "mini", "output_dir": str(out), "seeds": [0],
        "arms": [{"name": "sand", "recipe": "smoke", "report": {"sft": "SFT", "final": "SAND"}},
                 {"name": "control", "recipe": "smoke", "report": {"final": "control"}}],
        "comparisons": [{"question": "Does SAND beat the control?", "a": "sand/final", "b": "control/final"}]}))
    sand("sweep", str(spec), "--table-only")
    sand("view", str(out), "-o", str(tmp_path / "site"))
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    open_site(browser, tmp_path / "site" / "index.html")
    overview = browser.find_element(By.ID, "tab-overview").text
    assert "Sweep: arms × seeds" in overview and "success % seed 0" in overview
    assert "Does SAND beat the control?" in overview and "SFT" in overview and "control" in overview
    go(browser, "#eval")
    heads = [e.text for e in css(browser, "#eval-list thead th")]
    assert {"sand/seed0: final", "control/seed0: final", "sand/seed0: sft"} <= set(heads)
    visible(browser, "#eval-list tr.row")[0].click()
    WebDriverWait(browser, 10).until(lambda d: d.execute_script("return document.body.dataset.loaded") == "e/0")
    labels = [e.find_element(By.TAG_NAME, "h4").text for e in visible(browser, "#eval-detail .episode")]
    assert "sand/seed0: final" in labels and "control/seed0: final" in labels  # every arm's episode on the task
    go(browser, "#synth")
    options = [o.text for o in css(browser, "#s-source option")]
    assert any(o.startswith("sand/seed0") for o in options) and any(o.startswith("control/seed0") for o in options)
    browser.save_screenshot(str(artifacts / "view-sweep.png"))


def test_other_methods_units_and_pairs_are_shown_as_stored(browser, tmp_path):
    """An RFT-style unit and a pair file: no SAND records, shown generically, nothing dropped."""
    run_dir = tmp_path / "rft"
    run_dir.mkdir()
    (run_dir / RunLayout.RECIPE).write_text(yaml.safe_dump({"run": {"name": "rft-run", "iterations": 1},
                                                    "method": {"name": "rft"}}))
    log = UnitLog(run_dir / RunLayout.synthesis_units(1))
    log.append("t0", {"task_id": "t0", "explorations": [{"actions": ["go north"], "reward": 1.0, "success": True}],
                      "kept": [], "stats": {"explorations": 1, "kept": 1}})
    log.append("t1", {"something": {"a plugin's": ["own", "shape"]}})
    pair = {"id": "p0", "prompt": [{"role": "user", "content": "task"}],
            "chosen": [{"role": "assistant", "content": "Thought: yes\nAction: go north"}],
            "rejected": [{"role": "assistant", "content": "Thought: no\nAction: go south"}],
            "rewards": {"chosen": 1.0, "rejected": 0.0}}
    (run_dir / RunLayout.preference_pairs(1)).write_text(json.dumps(pair) + "\nnot json\n")
    info = build_site(run_dir, tmp_path / "site")
    assert any("not JSON" in n for n in info["notes"])
    from selenium.webdriver.common.by import By

    open_site(browser, info["index"], "#synth")
    go(browser, "#synth/s0/0", "s0/0")
    text = browser.find_element(By.ID, "synth-detail").text
    assert "explorations" in text and "go north" in text
    go(browser, "#synth/s0/1", "s0/1")
    assert "a plugin's" in browser.find_element(By.ID, "synth-detail").text
    go(browser, "#synth/p1/0", "p1/0")
    text = browser.find_element(By.ID, "synth-detail").text
    assert "chosen" in text and "rejected" in text and "Action: go south" in text


def test_serve_binds_localhost_and_prints_the_ssh_hint(run, tmp_path):
    proc = subprocess.Popen([*SAND, "view", str(run), "-o", str(tmp_path / "site"), "--serve", "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        lines = [proc.stdout.readline() for _ in range(3)]
        assert lines[0].startswith("view: ") and "http://127.0.0.1:" in lines[1] and "ssh -L" in lines[2]
        port = int(lines[1].split("http://127.0.0.1:")[1].split("/")[0])
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/index.html", timeout=10).read().decode()
        assert "SAND view" in body
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_engine_time_per_role_reaches_summary_metrics_report_and_view(run, site, tmp_path):
    """Issue 39, item 2: the data-building stage's busy seconds per engine role over its wall seconds. The
    deliberating smoke run calls both roles (agent: samples and rollouts; base: critiques and syntheses) on one
    in-process model, where the roles take turns: their busy seconds together fit in the stage's wall."""
    from sand_framework.report import build_report

    engine = json.loads((run / "state.json").read_text())["done"]["synth/iter1"]["engine_time"]
    agent, base = engine["agent"], engine["base"]
    assert agent["busy_seconds"] > 0 and base["busy_seconds"] > 0
    assert agent["busy_seconds"] + base["busy_seconds"] <= engine["wall_seconds"] + 0.05
    rates = json.loads((run / "metrics.json").read_text())["rollouts"]["synth/iter1"]
    assert rates["engine_utilization_by_role"] == {"agent": agent["utilization"], "base": base["utilization"]}
    md = build_report([run], tmp_path / "report").read_text()
    section = md.split("## Engine time", 1)[1].split("\n## ", 1)[0]
    assert f"| {engine['wall_seconds']:.1f} | {agent['busy_seconds']:.1f} (" in section
    assert "Engine time" in site["index"].read_text()
