"""Get a model from the Hugging Face Hub: search (search.py), what a repository offers (details.py), download with
progress, cancel, resume and the Hub's hashes (download.py), and whether the network may be used at all (network.py).
What fits this machine is train/fit.py; what the cache holds, model/hub_cache.py. Qt-free; nothing touches the
network until a function here is called, and each checks the person's network setting first."""
