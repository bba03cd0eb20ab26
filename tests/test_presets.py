"""Presets have one home (rllib_fast/presets.py): the shipped experiment files that
name a preset's algorithm and task use its settings, and a missing preset is one line."""
from pathlib import Path

import pytest
import yaml

from rllib_fast.presets import PRESETS, preset

ROOT = Path(__file__).resolve().parents[1] / "tune_configs"

# experiment file -> (algorithm, task) whose preset its config carries
FILES = {
    "pql-pendulum.yaml": ("PQL", "Pendulum"),
    "pql-pendulum-ray.yaml": ("PQL", "Pendulum"),
}


@pytest.mark.parametrize("name", sorted(FILES))
def test_shipped_experiment_files_use_the_preset(name):
    algo, task = FILES[name]
    (spec,) = yaml.safe_load((ROOT / name).read_text()).values()
    assert spec["run"] == algo and spec["env"] == task
    config = spec["config"]
    for key, value in preset(algo, task).items():
        assert config.get(key) == value, f"{name}: {key} = {config.get(key)!r}, preset has {value!r}"


def test_presets_are_copies_and_name_registered_config_keys():
    from rllib_fast.algorithms import CONFIGS

    for algo, tasks in PRESETS.items():
        fields = CONFIGS[algo]().to_dict()
        for task in tasks:
            kw = preset(algo, task)
            assert set(kw) <= set(fields), (algo, task, set(kw) - set(fields))
            kw["num_envs"] = -1
            assert preset(algo, task).get("num_envs") != -1  # callers may edit their copy


def test_unknown_preset_is_one_line():
    with pytest.raises(KeyError) as err:
        preset("FastPPO", "CartPole")
    assert "defaults are the recommended settings" in str(err.value) and "\n" not in str(err.value)
