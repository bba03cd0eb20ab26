"""Faithful stand-ins for simulators that cannot be installed here.

Isaac Gym needs Python <= 3.8 and an NVIDIA GPU; Isaac Lab needs Isaac Sim. The
adapters in :mod:`rllib_fast.envs.isaacgym` and :mod:`rllib_fast.envs.isaaclab`
are tested against these small torch tasks, which reproduce the *interface
semantics* of the real base classes (buffer layout and aliasing, reset timing,
time-out rule, extras, clipping, spaces) -- not their physics.

* :mod:`.vectask` -- IsaacGymEnvs ``VecTask`` semantics and ``PointReachTask``.
* :mod:`.isaaclab` -- Isaac Lab ``DirectRLEnv``/``ManagerBasedRLEnv`` semantics
  and ``PointReachLabEnv``.

Both modules import only torch and numpy (never ``rllib_fast``), so the
process-isolated mode can load them by file path in a bare simulator process.
"""
