"""The benchmark harness itself (benchmarks/protocol.py, benchmarks/bench.py): the clock,
the success window, the cores column and the median are the protocol of
docs/benchmarks.md, so they are checked on fake arms whose curve is known.

The assertions are identities of the harness's own bookkeeping (the time to target
splits into startup, training and evaluation; the tree's CPU is the sum of its
processes'), so they hold on a loaded machine too.
"""
import math
import time
import os

import pytest
import torch

from tests._benchmarks import load_benchmark


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("bench.py", "rllib_fast_bench_runner_test")


@pytest.fixture(scope="module")
def protocol(bench):
    return bench.protocol


def _run(bench, tmp_path, arm, **spec):
    suite = bench.SUITES["fake"]
    (a,) = [x for x in suite.arms if x.name == arm]
    s = bench.make_spec(suite, a, 100)
    s.update(spec)
    return bench.protocol.run_child(s, str(tmp_path), grace_s=30.0, verbose=False)


def test_known_curve_gives_known_time_to_target(bench, tmp_path):
    # return = 10 * training time / 1 s: the target 5.0 is crossed after 0.5 s of training
    rec = _run(bench, tmp_path, "fake", budget_s=30.0)
    assert rec["status"] == "ok"
    r = rec["reached"]
    assert r is not None and r["ret"] >= 5.0
    assert 0.5 <= r["train_s"] <= 0.5 + 0.2          # one 0.05 s step of granularity, with slack
    # the clock runs from process start: startup (imports, build) is on it
    assert r["t"] == pytest.approx(rec["startup_s"] + r["train_s"], abs=0.05)
    assert rec["startup_s"] > 0
    # the run stopped at the target, and the window held 100 episodes when it counted
    assert rec["points"][-1]["t"] == r["t"]
    assert all(p["ret"] is None or p["episodes"] >= 100 for p in rec["points"])


def test_greedy_evaluation_is_charged_to_the_clock(bench, tmp_path):
    rec = _run(bench, tmp_path, "fake", budget_s=30.0, eval_every_s=0.2, params=dict(ramp_s=1.0, top=10.0, eval_s=0.3))
    r = rec["reached"]
    assert r is not None and len(rec["evals"]) >= 1
    assert rec["eval_s"] >= 0.3 * len(rec["evals"]) - 1e-6
    # the same training time to target, but the evaluations' wall time is on the clock
    assert 0.5 <= r["train_s"] <= 0.7
    evals_before = sum(e["eval_s"] for e in rec["evals"] if e["t"] <= r["t"])
    assert evals_before >= 0.3
    assert r["t"] == pytest.approx(rec["startup_s"] + r["train_s"] + evals_before, abs=0.05)


def test_cores_of_a_two_process_arm_count_both_processes(bench, tmp_path):
    # the arm's main process and one helper both burn CPU for the whole budget
    rec = _run(bench, tmp_path, "fake-2proc", budget_s=2.5)
    assert rec["status"] == "ok" and rec["reached"] is None
    tree, own = rec["notes"]["tree_cpu_s"], rec["notes"]["own_cpu_s"]   # read at the same moment
    # the tree's CPU is the main process's plus the helper's, which burns as long: about 2x
    assert 1.5 <= tree / own <= 2.6, (tree, own)
    assert rec["cores"] == pytest.approx(rec["end"]["cpu_s"] / rec["end"]["t"])
    assert rec["end"]["cpu_s"] >= tree
    one = _run(bench, tmp_path / "one", "fake-2proc", budget_s=2.5,
               params=dict(ramp_s=100.0, burn=True, helper_processes=0, step_s=0.1))
    assert one["notes"]["tree_cpu_s"] / one["notes"]["own_cpu_s"] <= 1.1


def test_unreached_seed_counts_as_not_reached_in_the_median(bench):
    def run(seed, t_reach):
        pts = [dict(t=1.0, train_s=0.5, steps=10, ret=1.0, cpu_s=1.0)]
        if t_reach is not None:
            pts.append(dict(t=t_reach, train_s=t_reach - 1, steps=100, ret=9.5, cpu_s=t_reach))
        return dict(arm="a", seed=seed, points=pts, status="ok", cores=1.0, eval_s=0.0, startup_s=0.5)

    data = dict(mode="target", target=9.0, runs=[run(100, 10.0), run(101, None), run(102, None)])
    (row,) = bench.arm_rows(data)
    assert row["reached"] == 1 and row["n"] == 3
    assert bench.median(row["t"]) == math.inf
    assert "not reached" in bench.report(data)
    data["runs"] = [run(100, 10.0), run(101, 20.0), run(102, None)]
    (row,) = bench.arm_rows(data)
    assert bench.median(row["t"]) == 20.0
    # an even count with one unreached seed: the upper middle is +inf
    assert bench.median([1.0, 2.0, math.inf, math.inf]) == math.inf


def test_success_window_needs_100_episodes_and_groups_take_their_own(protocol):
    s = protocol.Session(dict(arm="x", seed=0, target=5.0, budget_s=100.0), t0=time.time())
    assert not s.report(10, [9.0] * 99)
    assert s.metric() is None                      # 99 episodes: no verdict yet
    assert s.report(20, [9.0])
    s = protocol.Session(dict(arm="x", seed=0, target=5.0, budget_s=100.0), t0=time.time())
    s.report(10, {"member_0": [1.0] * 100, "member_1": [4.0] * 60 + [8.0] * 40})
    assert s.metric() == pytest.approx(0.6 * 4 + 0.4 * 8)   # the best member by its own window
    s.reset_group("member_1")
    assert s.metric() == pytest.approx(1.0)


def test_a_library_window_mean_is_the_metric_once_given(protocol):
    """The CLI arm sees only the library's own last-100 mean: None until the
    library's window is full, then that mean decides."""
    s = protocol.Session(dict(arm="x", seed=0, target=5.0, budget_s=100.0), t0=time.time())
    assert not s.report(10, window_mean=None)
    assert s.metric() is None
    assert not s.report(20, window_mean=4.0)
    assert s.report(30, window_mean=5.5) and s.reached["steps"] == 30


def test_a_result_read_late_is_placed_when_it_happened(protocol):
    """A CLI run's results reach the harness in batches, seconds late: a result stamped
    with the time it was produced (``at``) goes on the clock there, its training time
    moves back with it, and its CPU sample keeps its own time, so the cores column
    (CPU s / the sample's time) is not inflated by the late read."""
    t0 = time.time() - 20.0                       # the arm's process started 20 s ago
    s = protocol.Session(dict(arm="x", seed=0, target=5.0, budget_s=100.0), t0=t0)
    s.train_t0 = t0 + 1.0                         # its build took 1 s
    assert s.report(30, window_mean=6.0, at=t0 + 12.0)
    r = s.reached
    assert r["t"] == pytest.approx(12.0)
    assert r["cpu_t"] == pytest.approx(20.0, abs=1.0) and r["cpu_t"] > r["t"]
    assert r["train_s"] == pytest.approx(11.0, abs=1.0)
    s2 = protocol.Session(dict(arm="x", seed=0, target=5.0, budget_s=100.0), t0=time.time() - 5.0)
    s2.report(10, window_mean=1.0, at=time.time() + 60.0)         # a stamp in the future: never after the read
    assert s2.rows[-1]["t"] == pytest.approx(5.0, abs=1.0)


def test_results_file_round_trip_and_report(bench, tmp_path):
    suite = bench.SUITES["fake"]
    data = bench.run_suite(suite, [100], [a for a in suite.arms if a.name == "fake"], str(tmp_path))
    assert data["protocol"] == bench.protocol.PROTOCOL and data["runs"][0]["commit"]
    md = bench.write_report(suite, bench.load_results(str(tmp_path / "fake.json")), str(tmp_path))
    text = open(md).read()
    assert "| `fake` | 1/1 |" in text and "last100-train-return" in text
    assert os.path.exists(tmp_path / "fake.png")


def test_every_suite_names_existing_adapters(bench):
    import ast

    with open(os.path.join(os.path.dirname(bench.__file__), "adapters.py")) as f:
        defined = {n.name for n in ast.parse(f.read()).body if isinstance(n, ast.FunctionDef)}
    for suite in bench.SUITES.values():
        for arm in suite.arms:
            assert ":" in arm.adapter or arm.adapter in defined, (suite.name, arm.name, arm.adapter)
        assert len({a.name for a in suite.arms}) == len(suite.arms)
        if suite.tuning:   # recipe searches stay on tuning seeds, which no published suite uses
            assert max(suite.seeds) < 100 and suite.peer is None
        elif suite.name != "fake" and suite.mode == "target":
            assert min(suite.seeds) >= 100 and len(suite.seeds) >= 5


def test_reward_terms_are_recorded_and_plotted_from_the_results_file(bench, tmp_path):
    # the task's own reward terms ride on each curve point, land in the results file, and the
    # report (--report-only's path) draws the velocity-tracking ones under the return
    import dataclasses

    suite = bench.SUITES["fake"]
    (arm,) = [dataclasses.replace(a, params=dict(a.params, terms=["tracking_lin_vel", "feet_air_time"]))
              for a in suite.arms if a.name == "fake"]
    bench.run_suite(suite, [100], [arm], str(tmp_path))
    data = bench.load_results(str(tmp_path / "fake.json"))
    pts = [p for p in data["runs"][0]["points"] if p.get("ret") is not None]
    assert pts and all(p["terms"]["tracking_lin_vel"] == pytest.approx(p["ret"] / 10.0) for p in pts)
    assert bench.term_names(data) == ["tracking_lin_vel"]     # only the tracking terms are drawn
    png = tmp_path / "fake.png"
    png.unlink(missing_ok=True)
    bench.write_report(suite, data, str(tmp_path))
    assert png.exists()


def test_reward_term_curves_are_trailing_means(bench):
    # a report holds the few episodes of one iteration: the plot draws each term's trend
    assert bench.trailing_mean([1.0, 3.0, 5.0, 7.0], 2) == [1.0, 2.0, 4.0, 6.0]
    assert bench.trailing_mean([2.0, 4.0], 50) == [2.0, 3.0]
    assert bench.trailing_mean([], 3) == []


def test_rllib_fast_results_hand_their_reward_terms_to_the_curve(bench):
    adapters = bench.protocol.resolve("fake").__globals__
    terms = adapters["reward_terms"]({"env_runners": {"reward_terms": {"tracking_lin_vel": 0.5, "bad": float("nan")},
                                                      "episode_return_mean": 1.0}})
    assert terms == {"tracking_lin_vel": 0.5}
    assert adapters["reward_terms"]({"env_runners": {}}) == {}


@pytest.mark.parametrize("suite_name", ["go1", "go1-ppo-tuning", "ant", "humanoid", "humanoid-ppo-tuning"])
def test_robot_suite_files_parse_and_validate(bench, suite_name):
    # every rllib_fast arm of the robot suites resolves its file (run swap, drops, overrides) and
    # passes the config's validation without building the env
    adapters = bench.protocol.resolve("fake").__globals__
    for arm in bench.SUITES[suite_name].arms:
        if arm.adapter != "rllib_fast_file":
            continue
        p = arm.params
        cls, config, _ = adapters["file_config"](p["path"], p.get("run"), p.get("drop", ()),
                                                 dict(p.get("overrides") or {}, seed=100))
        cls.get_default_config().update_from_dict(config).validate()

def test_rsl_rl_mjlab_arm_masks_the_actor_group_and_builds_rsl_rls_recurrent_actor(bench):
    """The `mjlab-masked` suite's rsl_rl arm: the velocity terms are removed from
    mjlab's actor group on the env cfg (the critic group keeps them, as for our arms'
    `drop_actor_terms`), and rsl_rl's runner builds its RNNModel actor from `rnn`."""
    pytest.importorskip("mjlab")
    (arm,) = [a for a in bench.SUITES["mjlab-masked"].arms if a.name == "rsl_rl-lstm-128"]
    params = dict(arm.params, num_envs=2)
    env, runner = bench.adapters.build_rsl_rl_mjlab(seed=0, **params)
    try:
        obs = env.get_observations()
        assert obs["actor"].shape == (2, 3) and obs["critic"].shape == (2, 5)   # cart pos, pole cos/sin (+ vels)
        actor, critic = runner.alg.actor, runner.alg.critic
        assert type(actor).__name__ == "RNNModel" and actor.is_recurrent
        assert type(critic).__name__ == "MLPModel"
        assert actor.rnn.rnn.hidden_size == 256 and actor.rnn.rnn.num_layers == 1
        with pytest.raises(ValueError, match="rnn_on"):
            bench.adapters.build_rsl_rl_mjlab(seed=0, **dict(params, rnn_on="policy"))
    finally:
        env.close()


def test_rsl_rl_envpool_arm_overrides_reach_rsl_rls_actor_and_algorithm(bench):
    """The `go1-ppo-tuning` suite's peer with a smaller initial std: the dotted overrides reach the
    runner rsl_rl builds over the real envpool Go1 pool (its actor's std and the PPO entropy
    coefficient), and an unknown key is refused before the pool is built."""
    pytest.importorskip("mjlab")
    pytest.importorskip("envpool")
    (arm,) = [a for a in bench.SUITES["go1-ppo-tuning"].arms if a.name == "rsl_rl-64-std0.3"]
    env, runner = bench.adapters.build_rsl_rl_envpool(seed=0, **dict(arm.params, num_envs=2))
    try:
        params = dict(runner.alg.actor.named_parameters())
        (std,) = [p for n, p in params.items() if n.endswith("std_param")]   # GaussianDistribution, 'scalar'
        assert std.shape == (12,) and torch.allclose(std, torch.full_like(std, 0.3))
        assert runner.alg.entropy_coef == 0.0
    finally:
        env.close()
    with pytest.raises(ValueError, match="algorithm.entropy_coeff"):
        bench.adapters.build_rsl_rl_envpool(seed=0, **dict(arm.params, num_envs=2,
                                                            overrides={"algorithm.entropy_coeff": 0.0}))


def test_every_mjlab_cartpole_arm_runs_the_suites_10_s_episodes(bench):
    # mjlab's own Cartpole episodes last 50 s (return <= 50): an arm that forgets the suite's
    # 10 s reaches the 9.0 bar on a different task (pop-balance's first Tune PBT run did)
    adapters = bench.protocol.resolve("fake").__globals__
    checked = 0
    for suite in bench.SUITES.values():
        if suite.probe.get("kind") != "mjlab" or suite.target is None:   # learning suites on mjlab Cartpole
            continue
        for arm in suite.arms:
            p = arm.params
            if "path" in p:   # rllib_fast_file, rllib_cli, tune_pbt: the file as the arm overrides it
                _, config, _ = adapters["file_config"](p["path"], p.get("run"), p.get("drop", ()),
                                                       dict(p.get("overrides") or {}))
                length = ((config.get("env_config") or {}).get("cfg") or {}).get("episode_length_s")
            else:             # rsl_rl's runner and the single files take it as a parameter
                length = p.get("episode_length_s")
            assert length == 10.0, (suite.name, arm.name, length)
            checked += 1
    assert checked >= 20


def test_stop_at_bar_times_other_arms_to_the_reference_bar_and_the_report_says_so(bench):
    import dataclasses

    suite = dataclasses.replace(bench.SUITES["fake"], mode="fixed", reference="fake-slow")
    ref, other = suite.arms[2], suite.arms[0]
    data = dict(mode="fixed", reference="fake-slow", runs=[])
    with pytest.raises(SystemExit, match="run the reference arm first"):
        bench.bar_spec(bench.make_spec(suite, other, 100), data, suite, other)

    def run(arm, seed, rets, **extra):
        pts = [dict(t=1.0 + i, train_s=float(i), steps=10 * (i + 1), ret=x, cpu_s=1.0 + i) for i, x in enumerate(rets)]
        return dict(arm=arm, seed=seed, points=pts, status="ok", cores=1.0, eval_s=0.0, startup_s=1.0, **extra)

    data["runs"] = [run("fake-slow", 100, [1.0, 3.0]), run("fake-slow", 101, [1.0, 5.0]), run("fake-slow", 102, [4.0])]
    spec = bench.bar_spec(bench.make_spec(suite, other, 100), data, suite, other)
    # the bar is the reference's median final return; the other arm stops there (target mode)
    assert spec["target"] == 4.0 and spec["mode"] == "target" and spec["stopped_at_bar"] == 4.0
    # the reference arm itself runs its whole budget
    assert bench.bar_spec(bench.make_spec(suite, ref, 100), data, suite, ref)["mode"] == "fixed"
    data["runs"].append(run("fake", 100, [2.0, 4.5], stopped_at_bar=4.0))
    rows = {r["arm"]: r for r in bench.arm_rows(data)}
    assert rows["fake"]["t"] == [2.0] and rows["fake"]["final"] == []   # timed, but no budget-end return
    assert "Stopped at the bar" in bench.report(data)
    # asked to stop at the bar but never reaching it, a run ran its whole budget: its return counts
    data["runs"] = [r for r in data["runs"] if r["arm"] != "fake"] + [run("fake", 101, [2.0, 3.5], stopped_at_bar=4.0)]
    rows = {r["arm"]: r for r in bench.arm_rows(data)}
    assert rows["fake"]["t"] == [math.inf] and rows["fake"]["final"] == [3.5]
    assert "Stopped at the bar" not in bench.report(data)


def test_a_new_probe_does_not_relabel_runs_recorded_before_runs_carried_their_own(bench):
    old = dict(sim="s", sim_steps_per_s=3632.0, cpu_model="x", cores=2)
    new = dict(sim="s", sim_steps_per_s=3015.0, cpu_model="x", cores=2)
    data = dict(machine=old, runs=[dict(arm="a", seed=100, points=[]), dict(arm="b", seed=100, points=[], machine=new)])
    bench.stamp_machine(data, new)
    assert data["machine"] is new
    assert data["runs"][0]["machine"] is old and data["runs"][1]["machine"] is new
    text = bench.machines_text(data)
    assert "3,632" in text and "3,015" in text and "`a`" in text and "`b`" in text


def test_a_reference_that_did_not_learn_flags_its_bar_and_the_report_gives_returns_at_fixed_times(bench):
    def run(arm, rets, budget=40.0):
        pts = [dict(t=10.0 * (i + 1), train_s=10.0 * i, steps=100 * (i + 1), ret=x, cpu_s=1.0) for i, x in enumerate(rets)]
        return dict(arm=arm, seed=100, points=pts, status="ok", cores=1.0, eval_s=0.0, startup_s=1.0, budget_s=budget)

    data = dict(mode="fixed", reference="ref", runs=[run("ref", [0.5, 0.2, 0.3, 0.4]), run("ours", [0.1, 2.0, 4.0, 6.0])])
    assert bench.degenerate_bar(data)                        # 0.4 at the end <= 0.5 at its first window
    text = bench.report(data)
    assert "The bar measures nothing here" in text
    # quarter, half and whole budget (10, 20, 40 s): the last window at or before each
    assert "| `ours` | 0.10 | 2.00 | 6.00 | 400 |" in text
    data["runs"][0] = run("ref", [0.1, 0.2, 0.3, 0.4])     # a reference that learned: a real bar
    assert not bench.degenerate_bar(data)
    assert "measures nothing" not in bench.report(data)


def test_tracking_terms_at_the_end_of_each_run_stand_beside_the_baseline(bench):
    # the return bar can be reached by a robot that only stopped falling: the report sets each
    # arm's tracking terms over its final stretch against what standing still earns
    def run(arm, seed, values, **extra):
        pts = [dict(t=100.0 * (i + 1), train_s=100.0 * i, steps=10 * (i + 1), ret=1.0, cpu_s=1.0,
                    terms={"tracking_lin_vel": v, "pose": 9.0}) for i, v in enumerate(values)]
        return dict(arm=arm, seed=seed, points=pts, status="ok", cores=1.0, eval_s=0.0, startup_s=1.0, **extra)

    window = bench.TERM_END_WINDOW_S
    assert window == 120.0   # the last two 100-s reports below fall in it
    data = dict(mode="fixed", reference="ref", term_baselines={"tracking_lin_vel": 0.25},
                term_baselines_what="standing still", runs=[
                    run("ref", 100, [0.1, 0.2, 0.3, 0.5]), run("ref", 101, [0.1, 0.1, 0.2, 0.2]),
                    run("ours", 100, [0.6, 0.8], stopped_at_bar=1.0), run("ours", 101, [0.6, 0.8], stopped_at_bar=5.0)])
    table = "\n".join(bench.terms_at_end_table(data))
    assert "tracking_lin_vel, last 120 s" in table and "pose" not in table   # only the plotted terms
    assert "| `ref` | 0.300 [0.200–0.400] | 2 budget |" in table   # seeds' means 0.4 and 0.2
    # asked to stop at a bar of 5.0, seed 101 never reached it: it ran its budget
    assert "| `ours` | 0.700 [0.700–0.700] | 1 at the bar, 1 budget |" in table
    assert "| standing still | 0.250 | – |" in table
    assert "Velocity tracking at the end" in bench.report(data)
    assert bench.terms_at_end_table(dict(runs=[run("x", 100, [])])) == []
