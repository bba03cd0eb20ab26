"""Scale-out on a simulated two-node Ray cluster (``ray.cluster_utils.Cluster``) on this machine.

* a sweep file run with ``rllib-fast sweep FILE --address HOST:PORT`` places
  its trials on both nodes (each trial reports the node id it ran on);
* PQL with the Ray-actor back-end: its components (Actor in the trial process,
  V-learner and P-learner actors) are placed by resource bundles of the
  trial's placement group and end up on different nodes.

One cluster (2 nodes x 2 logical CPUs) is shared by the module.
"""
import json

import pytest
import ray

from rllib_fast.cli import main

pytestmark = pytest.mark.usefixtures("isolated_run")


@pytest.fixture(scope="module")
def cluster():
    from ray.cluster_utils import Cluster

    if ray.is_initialized():
        ray.shutdown()
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False})
    c.add_node(num_cpus=2)
    c.wait_for_nodes()
    yield c
    if ray.is_initialized():
        ray.shutdown()
    c.shutdown()


SWEEP = """\
two-nodes:
    run: FastPPO
    env: CartPole
    num_samples: 2
    stop: {training_iteration: 2}
    config: {num_envs: 8, rollout_length: 16, num_minibatches: 2, decorrelate_steps: 0, seed: {randint: [0, 100]}}
    resources: {cpu: 2}
    callbacks: rllib_fast.tune.sweep:ReportNodeCallback
    checkpoint_config: {checkpoint_at_end: true}
"""


def test_sweep_trials_land_on_both_nodes(cluster, tmp_path, capsys):
    f = tmp_path / "two-nodes.yaml"
    f.write_text(SWEEP)
    rc = main(["sweep", str(f), "--address", cluster.address, "--no-mlflow", "-q",
               "--storage-path", str(tmp_path / "runs")])
    out = capsys.readouterr().out
    assert rc == 0 and "trials: 2 (2 ok, 0 errored)" in out, out[-3000:]
    exp = tmp_path / "runs" / "two-nodes"
    nodes = set()
    for result_file in exp.glob("*/result.json"):
        results = [json.loads(ln) for ln in result_file.read_text().splitlines() if ln.strip()]
        assert results[-1]["training_iteration"] == 2
        nodes |= {r["node_id"] for r in results}
    cluster_nodes = {n.node_id for n in cluster.list_all_nodes()}
    assert len(cluster_nodes) == 2
    assert nodes == cluster_nodes, f"trials ran on {nodes}, cluster nodes {cluster_nodes}"


def test_pql_ray_backend_components_on_different_nodes(cluster, tmp_path):
    from ray import tune

    from rllib_fast.algorithms import CONFIGS
    from rllib_fast.cli import ensure_registered

    ray.init(address=cluster.address, log_to_driver=False)
    ensure_registered()
    try:
        # three 1-CPU bundles (Actor/driver, V-learner, P-learner) on two 2-CPU nodes: whatever the
        # packing, the components cannot all share one node
        cfg = CONFIGS["PQL"]().environment("Pendulum", num_envs=8).training(
            backend="ray", num_cpus_per_pql_learner=1.0, hidden_sizes=[16], batch_size=32, buffer_size=2048,
            learning_starts=32, warmup_steps=4, steps_per_iteration=8).debugging(seed=0)
        results = tune.Tuner("PQL", param_space=cfg, run_config=tune.RunConfig(
            storage_path=str(tmp_path), stop={"training_iteration": 2}, verbose=0)).fit()
        assert not results.errors, results.errors
        assert results[0].metrics["num_env_steps_sampled_lifetime"] > 0
        from ray._private.state import actors  # GCS actor table (dead actors included)

        table = actors().values()
        learners = [a for a in table if a.get("ActorClassName", "").endswith("PQLLearnerHost")]
        trial = [a for a in table if a.get("ActorClassName", "").endswith("PQL")]
        assert len(learners) == 2 and trial, [a.get("ActorClassName") for a in table]
        where = {a["Address"]["NodeID"] for a in learners + trial}
        assert len(where) == 2, f"PQL components all on one node: {where}"
    finally:
        ray.shutdown()
