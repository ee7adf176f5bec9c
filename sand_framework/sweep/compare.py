"""Answers to a sweep's questions: paired tests of two table rows on the same games.

Every arm evaluates the same games, so two rows are compared game by game
(paired), which is far more sensitive than comparing their means. The per-game
outcomes come from each finished run's ``eval/<model>/<split>.units.jsonl``
(one unit per game, with the trajectory's ``success``).

Two tests are reported for every question and split:

- **McNemar** (exact) over (seed, game) pairs: row a's run of seed k against
  row b's run of seed k on each game. It treats every pair as independent, but
  the seeds replay the *same* games, so a game that one row always wins counts
  once per seed: with deterministic greedy evaluation three seeds triple the
  evidence without adding any. Its p is optimistic.
- **Sign test** (exact) over games: per game, each row's success averaged over
  the paired seeds; a game counts for the row whose average is higher. Games
  are the independent unit, so **the verdict uses this one**.

Pairing: seed k with seed k; an arm declared with a single seed (greedy
evaluation of the untrained base model is the same for every seed) stands
against every seed of the other arm (:func:`sand_framework.sweep.spec.seed_pairs`).
Two runs of one seed are paired only if they come from the same SFT start: the digests of their
``weights/iter0`` tensors (:func:`~sand_framework.sweep.export.weights_digests`) must agree where both are
known. They differ when a seed's SFT start was trained again (its weights lost with a machine, rebuilt on
another that computes in other floating-point order: measured, an Intel AMX and an AMD AVX-512 machine gave
different tensors for the same recipe) after some of its arms had finished. By default such a pair is left out
and named, never silently mixed into the test; with the sweep file's ``pair_starts: recipe`` it is paired when
the two starts' ``train/iter0`` fingerprints are equal (the same recipe, data, seed and plugin versions
computed them), and named under the question's table as a rebuilt start.

Several questions: with the sweep file's ``correction`` (``bonferroni`` or ``holm``) every verdict compares the
sign test's p adjusted for all the declared questions (comparisons × splits) with ``alpha``, and says so; the
summary table at the head of the section gives each question's answer in one row.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sand_framework.report.tables import markdown_table
from sand_framework.store import RunDir, RunLayout, UnitLog
from sand_framework.sweep.paired import adjusted_p_values, binomial_two_sided, wilson_interval
from sand_framework.sweep.runner import finished, run_dir_of
from sand_framework.sweep.export import weights_digests
from sand_framework.sweep.spec import ComparisonSpec, SweepSpec, seed_pairs

Outcomes = dict[int, dict[str, bool]]
"""seed -> game (task id) -> success, for one (arm, model, split)."""


@dataclass
class GameOutcomes:
    """Per-game success of every finished run, read once per (arm, model, split) from the eval unit logs."""

    spec: SweepSpec
    out: Path
    _cache: dict[tuple[str, str, str], Outcomes] = field(default_factory=dict, repr=False)
    _starts: dict[tuple[str, str, str], str | None] = field(default_factory=dict, repr=False)
    _start_recipes: dict[tuple[str, int], Any] = field(default_factory=dict, repr=False)

    def get(self, arm: str, model: str, split: str) -> Outcomes:
        key = (arm, model, split)
        if key not in self._cache:
            found: Outcomes = {}
            for seed in self.spec.seeds_of(self.spec.arm(arm)):
                run = run_dir_of(self.out, arm, seed)
                log = run / RunLayout.eval_units(model, split)
                if finished(run) and log.is_file():
                    games = {u["trajectory"]["task_id"]: bool(u["trajectory"].get("success"))
                             for u in UnitLog(log).values()}
                    if games:
                        found[seed] = games
            self._cache[key] = found
        return self._cache[key]

    def start(self, arm: str, seed: int) -> str | None:
        """The tensors digest of the run's SFT start (``weights/iter0``), or None where neither its weights nor an
        export's record of them is there."""
        key = (arm, str(seed), "start")
        if key not in self._starts:
            self._starts[key] = weights_digests(run_dir_of(self.out, arm, seed)).get(RunLayout.weights(0))
        return self._starts[key]

    def start_recipe(self, arm: str, seed: int) -> Any:
        """The fingerprint the run recorded for its SFT start (``train/iter0``: recipe settings, input digests,
        plugin versions; an arm that reused the start holds its source's), or None."""
        key = (arm, seed)
        if key not in self._start_recipes:
            self._start_recipes[key] = RunDir(run_dir_of(self.out, arm, seed)).fingerprint(RunLayout.train_stage(0))
        return self._start_recipes[key]

    def starts(self, arm_a: str, arm_b: str, seed: int) -> str:
        """How the SFT starts of two runs of ``seed`` relate: ``same`` (the same tensors, or one is not known),
        ``rebuilt`` (the tensors differ, the ``train/iter0`` fingerprints are equal) or ``other``."""
        a, b = self.start(arm_a, seed), self.start(arm_b, seed)
        if a is None or b is None or a == b:
            return "same"
        fa, fb = self.start_recipe(arm_a, seed), self.start_recipe(arm_b, seed)
        return "rebuilt" if fa is not None and fa == fb else "other"


def success_interval(outcomes: Outcomes, seeds: list[int]) -> tuple[int, tuple[float, float] | None]:
    """(games, 95% Wilson interval of the success % in [0, 100]) of one table row over the given seeds.

    Each game's success is averaged over the seeds that played it and the interval rests on the number of
    distinct *games*, not (seed, game) pairs: seeds replaying the same games add no new games. (The Bernoulli
    variance bounds that of the per-game means, so with several seeds the interval is, if anything, wide.)
    """
    per_game: dict[str, list[bool]] = {}
    for seed in seeds:
        for game, ok in outcomes.get(seed, {}).items():
            per_game.setdefault(game, []).append(ok)
    if not per_game:
        return 0, None
    mean = statistics.fmean(statistics.fmean(v) for v in per_game.values())
    lo, hi = wilson_interval(mean * len(per_game), len(per_game))
    return len(per_game), (round(100 * lo, 2), round(100 * hi, 2))


@dataclass
class PairedResult:
    """One question on one split: counts, both exact tests, per-seed success rates and the verdict."""

    question: str
    a: str
    b: str
    a_label: str
    b_label: str
    split: str
    seed_pairs: list[tuple[int, int]]
    """(seed of a, seed of b) for every pair of finished runs compared."""
    pairs: int = 0
    """(seed, game) pairs: games evaluated by both runs of a seed pair, summed over seed pairs."""
    a_only: int = 0
    """Pairs that a won and b lost."""
    b_only: int = 0
    both: int = 0
    neither: int = 0
    mcnemar_p: float = 1.0
    games: int = 0
    games_a_better: int = 0
    """Games whose success averaged over the paired seeds is higher for a."""
    games_b_better: int = 0
    games_tied: int = 0
    sign_p: float = 1.0
    a_success: dict[int, float] = field(default_factory=dict)
    """Per seed of a: success % over the paired games."""
    b_success: dict[int, float] = field(default_factory=dict)
    unmatched: int = 0
    """Games evaluated by only one run of a seed pair (left out; 0 when both evaluated the same games)."""
    other_starts: list[tuple[int, int]] = field(default_factory=list)
    """Seed pairs left out because their two runs come from different SFT starts (``weights/iter0`` digests)."""
    rebuilt_starts: list[tuple[int, int]] = field(default_factory=list)
    """Seed pairs paired although their starts' tensors differ: the same start trained again (``pair_starts:
    recipe`` and equal ``train/iter0`` fingerprints)."""
    adjusted_p: float | None = None
    """The sign test's p adjusted for all the sweep's questions (``None`` without a correction)."""
    correction: str = "none"
    questions: int = 1
    """How many questions the correction accounts for (declared comparisons × splits)."""
    verdict: str = ""

    @property
    def ties(self) -> int:
        return self.both + self.neither

    @property
    def decisive_p(self) -> float:
        """The p a verdict compares with ``alpha``: adjusted for the sweep's questions where it corrects."""
        return self.sign_p if self.adjusted_p is None else self.adjusted_p

    @property
    def a_ahead(self) -> bool:
        """Whether row a won more games than row b (which row a "better" verdict names)."""
        return self.games_a_better > self.games_b_better

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ties": self.ties}


def compare(spec: SweepSpec, out: Path, splits: list[str], games: GameOutcomes | None = None) -> list[PairedResult]:
    """Every declared comparison on every split, from the finished runs (unfinished ones are left out)."""
    games = games or GameOutcomes(spec, out)
    results = [compare_one(spec, comp, split, games) for comp in spec.comparisons for split in splits]
    if spec.correction != "none":
        for res, adjusted in zip(results, adjusted_p_values([r.sign_p for r in results], spec.correction)):
            res.adjusted_p, res.correction, res.questions = adjusted, spec.correction, len(results)
            res.verdict = verdict(res, spec.alpha)
    return results


def compare_one(spec: SweepSpec, comp: ComparisonSpec, split: str, games: GameOutcomes) -> PairedResult:
    (arm_a, model_a), (arm_b, model_b) = comp.side("a"), comp.side("b")
    a, b = games.get(arm_a, model_a, split), games.get(arm_b, model_b, split)
    pairs = [(sa, sb) for sa, sb in seed_pairs(spec.seeds_of(spec.arm(arm_a)), spec.seeds_of(spec.arm(arm_b)))
             if sa in a and sb in b]
    relation = {(sa, sb): games.starts(arm_a, arm_b, sa) if sa == sb else "same" for sa, sb in pairs}
    rebuilt = [pair for pair, how in relation.items() if how == "rebuilt"]
    other = [pair for pair, how in relation.items() if how == "other"]
    if spec.pair_starts == "tensors":
        other, rebuilt = sorted(other + rebuilt), []
    pairs = [pair for pair in pairs if pair not in other]
    res = PairedResult(comp.question, comp.a, comp.b, spec.arm(arm_a).report[model_a] or comp.a,
                       spec.arm(arm_b).report[model_b] or comp.b, split, pairs, other_starts=other,
                       rebuilt_starts=rebuilt)
    per_game: dict[str, tuple[list[bool], list[bool]]] = {}
    a_rates: dict[int, list[bool]] = {}
    b_rates: dict[int, list[bool]] = {}
    for sa, sb in pairs:
        common = sorted(set(a[sa]) & set(b[sb]))
        res.unmatched += len(set(a[sa]) ^ set(b[sb]))
        for game in common:
            x, y = a[sa][game], b[sb][game]
            res.pairs += 1
            res.a_only += x and not y
            res.b_only += y and not x
            res.both += x and y
            res.neither += not x and not y
            per_game.setdefault(game, ([], []))[0].append(x)
            per_game[game][1].append(y)
            a_rates.setdefault(sa, []).append(x)
            b_rates.setdefault(sb, []).append(y)  # a single-seed b: the same games once per pair, same mean
    res.mcnemar_p = binomial_two_sided(res.a_only, res.b_only)
    for xs, ys in per_game.values():
        diff = statistics.fmean(xs) - statistics.fmean(ys)
        res.games_a_better += diff > 0
        res.games_b_better += diff < 0
        res.games_tied += diff == 0
    res.games = len(per_game)
    res.sign_p = binomial_two_sided(res.games_a_better, res.games_b_better)
    res.a_success = {s: round(100 * statistics.fmean(v), 2) for s, v in a_rates.items()}
    res.b_success = {s: round(100 * statistics.fmean(v), 2) for s, v in b_rates.items()}
    res.verdict = verdict(res, spec.alpha)
    return res


def fmt_p(p: float) -> str:
    return f"{p:.3g}"


def verdict(res: PairedResult, alpha: float) -> str:
    """A plain sentence from the sign test over games (adjusted for the sweep's questions where it corrects for
    them); says so when the correction or the (seed, game) test would have answered otherwise."""
    if not res.pairs:
        return "nothing to pair yet (no finished runs of both rows with this split evaluated)"
    winner = res.a_label if res.a_ahead else res.b_label
    shown = f"p={fmt_p(res.sign_p)}"
    if res.adjusted_p is not None:
        shown += f", {res.correction}-adjusted for {res.questions} questions p={fmt_p(res.adjusted_p)}"
    if res.decisive_p < alpha:
        text = f"{winner} better ({shown}, sign test over {res.games} games)"
    else:
        text = f"no detectable difference ({shown}, sign test over {res.games} games)"
        if res.sign_p < alpha:
            text += f"; without the correction for {res.questions} questions: {winner} better"
    if (res.mcnemar_p < alpha) != (res.sign_p < alpha):
        text += (f"; McNemar over the {res.pairs} (seed, game) pairs gives p={fmt_p(res.mcnemar_p)}, "
                 "but it counts a game replayed by every seed as independent evidence")
    return text


def answer(res: PairedResult, alpha: float) -> str:
    """The verdict in a few words, for the summary table: which row is better, or neither."""
    if not res.pairs:
        return "not paired yet"
    if res.decisive_p >= alpha:
        return "no detectable difference"
    return f"`{res.a if res.a_ahead else res.b}` better"


def _rates(rates: dict[int, float]) -> str:
    return ", ".join(f"s{s}: {v:.1f}" for s, v in sorted(rates.items())) or "–"


def comparisons_markdown(results: list[PairedResult], alpha: float) -> str:
    """The results.md section: one table and one verdict line per question (rows: splits)."""
    if not results:
        return ""
    first = results[0]
    several = ("no correction for several questions" if first.adjusted_p is None else
               f"each p {first.correction}-adjusted for the {first.questions} questions asked")
    parts = ["## Paired comparisons\n",
             f"Same games, paired. Verdicts use the exact sign test over games (per game, success averaged over "
             f"the paired seeds; α = {alpha}, two-sided, {several}); McNemar's exact "
             "test over (seed, game) pairs is shown too but is optimistic, because the seeds replay the same "
             "games. An arm run with one seed is paired with every seed of the other; two runs of one seed that "
             "come from different SFT starts are not paired.\n"]
    adjusted = [] if first.adjusted_p is None else [f"{first.correction}-adjusted p"]
    parts.append(markdown_table(
        ["question", "split", "seed pairs", "games a better / b better / tied", "sign-test p", *adjusted, "answer"],
        [[r.question, r.split, ", ".join(f"{x}–{y}" for x, y in r.seed_pairs) or "–",
          f"{r.games_a_better} / {r.games_b_better} / {r.games_tied}" if r.pairs else "–",
          fmt_p(r.sign_p) if r.pairs else "–",
          *([fmt_p(r.adjusted_p) if r.pairs else "–"] if adjusted else []), answer(r, alpha)] for r in results],
        "lll" + "r" * (2 + len(adjusted)) + "l"))
    parts.append("")
    questions: dict[tuple[str, str, str], list[PairedResult]] = {}
    for r in results:
        questions.setdefault((r.question, r.a, r.b), []).append(r)
    for (question, a, b), rows in questions.items():
        parts.append(f"### {question}\n")
        parts.append(f"a = {rows[0].a_label} (`{a}`), b = {rows[0].b_label} (`{b}`)\n")
        parts.append(markdown_table(
            ["split", "seed pairs (a–b)", "(seed, game) pairs", "a only", "b only", "ties", "McNemar p",
             "games a better / b better / tied", "sign-test p", "a success % by seed", "b success % by seed"],
            [[r.split, ", ".join(f"{x}–{y}" for x, y in r.seed_pairs) or "–", r.pairs, r.a_only, r.b_only, r.ties,
              fmt_p(r.mcnemar_p) if r.pairs else "–",
              f"{r.games_a_better} / {r.games_b_better} / {r.games_tied}", fmt_p(r.sign_p) if r.pairs else "–",
              _rates(r.a_success), _rates(r.b_success)] for r in rows], "ll" + "r" * 9))
        parts.append("")
        parts += [f"- `{r.split}`: **{r.verdict}**" for r in rows]
        unmatched = [r for r in rows if r.unmatched]
        parts += [f"- `{r.split}`: {r.unmatched} game(s) evaluated by only one side of a seed pair were left out"
                  for r in unmatched]
        parts += [f"- `{r.split}`: seed pair(s) {', '.join(f'{x}–{y}' for x, y in r.other_starts)} left out: their "
                  "two runs come from different SFT starts (their `weights/iter0` tensors differ: the start was "
                  "trained again after one of them finished)" for r in rows if r.other_starts]
        parts += [f"- `{r.split}`: seed pair(s) {', '.join(f'{x}–{y}' for x, y in r.rebuilt_starts)} paired "
                  "although their SFT starts' tensors differ: the same recipe, data, seed and plugin versions "
                  "trained the start again (its weights were lost with a machine; `pair_starts: recipe`)"
                  for r in rows if r.rebuilt_starts]
        parts.append("")
    return "\n".join(parts)
