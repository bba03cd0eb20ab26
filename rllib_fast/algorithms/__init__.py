"""Algorithm name -> class, registered with Tune by :func:`rllib_fast.register`."""
ALGORITHMS: dict = {}
