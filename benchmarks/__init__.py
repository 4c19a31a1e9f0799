"""Speed and memory of geojax against its peers (faiss, pytorch-metric-learning, PyTorch), each measured in
the same run as the peer, run from the checkout's root as modules: ``python -m benchmarks.search``,
``python -m benchmarks.ivf``, ``python -m benchmarks.losses`` … Each writes its figures with the machine,
the commit and the load to ``benchmarks/results/`` (``train.helpers.results``); ``--check`` on the search,
IVF and loss benchmarks reruns a stored comparison and fails when a ratio has fallen."""
