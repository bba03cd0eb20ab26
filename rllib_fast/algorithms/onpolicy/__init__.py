"""The layer the batched on-policy algorithms share (FastPPO, FastA2C, HTS-RL,
the asynchronous learners, distillation; PopPPO uses its reductions and config
helpers), one role per file:

- ``reductions``: ``masked_mean`` and ``standardize``, the losses' reductions
  over a batch's valid transitions;
- ``batch``: ``Targets`` and ``OnPolicyBatch``, what an update learns from;
- ``collectives``: ``LearnerCollectives`` and ``ParamSync``, how one learner's
  update meets the other learners;
- ``update``: the ``UpdateRule`` protocol (one minibatch's gradient step, the
  learning phase);
- ``whole_step``: that gradient step compiled as one graph under ``compile``;
- ``config``: ``OnPolicyConfig``, the keys every on-policy config shares;
- ``algorithm``: ``OnPolicyAlgorithm``, the loop (rollout -> targets -> update).

Import from the file that owns a name; this package module exports nothing.
"""
