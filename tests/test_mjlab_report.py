"""``benchmarks/mjlab.py``'s report logic (no simulator needed): the paired
overhead reading is a per-round ratio, and where it exists it decides the
throughput goal, not the separate arms run minutes apart; the Go1 arms take
mjlab's Go1 settings from the shipped tune config."""
from tests._benchmarks import load_benchmark


def _bench():
    return load_benchmark("mjlab.py", "rllib_fast_bench_mjlab_test")


def _paired(n, rounds):
    return dict(mode="paired", key=f"paired-{n}", label=f"paired N={n}", num_envs=n, notes={"paired": rounds})


def test_paired_ratios_are_taken_within_each_round():
    b = _bench()
    # the host's rate halves between rounds: ratios stay 10% / 20%, medians of rates do not
    rounds = [dict(raw_busy=r, adapter_busy=0.95 * r, rollout=0.9 * r, overall=0.8 * r) for r in (100.0, 50.0, 200.0)]
    (row,) = b.paired_summary([_paired(256, rounds), dict(mode="learn", notes={})])
    assert row["rounds"] == 3 and row["raw_busy"] == 100.0
    assert abs(row["rollout_below"] - 0.1) < 1e-9 and abs(row["overall_below"] - 0.2) < 1e-9
    assert abs(row["adapter_busy_below"] - 0.05) < 1e-9
    lo, hi = row["overall_range"]
    assert abs(lo - 0.2) < 1e-9 and abs(hi - 0.2) < 1e-9


def test_the_paired_reading_decides_the_throughput_goal():
    b = _bench()
    learn = [dict(family="FastPPO-rsl", label="FastPPO N=256", num_envs=256, n_reached=0, sps_overall=11_000.0,
                  sps_sampling=13_000.0)]
    busy = {256: {"tput_overall": 12_000.0}}     # separate window: 8% below, within 10%
    paired = b.paired_summary([_paired(256, [dict(raw_busy=100.0, adapter_busy=98.0, rollout=97.0,
                                                  overall=85.0)])])
    text = "\n".join(b._goals(learn, {}, busy, paired))
    assert "8% below raw busy (12k): **met**" in text
    assert "15% below raw busy in the same rounds" in text and "decides: **not met**" in text


def test_go1_arms_use_the_shipped_go1_settings():
    b = _bench()
    kw = b._shipped_settings(b.GO1_FILE)
    assert kw["rollout_length"] == 24 and list(kw["hidden_sizes"]) == [512, 256, 128] and kw["activation"] == "elu"
    assert not {"env_device", "num_envs", "seed"} & set(kw)
