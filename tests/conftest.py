"""Session-wide test settings.

One torch thread: the networks under test are small, and on a 2-core machine
torch's intra-op thread pool makes every small op wait on the other thread
(measured: several ms per op when the machine is busy), which made learning
tests 5-10x slower without changing what they check.
"""
import torch

torch.set_num_threads(1)
