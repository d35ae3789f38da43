"""Third-party-style training code run unchanged (tests/test_thirdparty.py): a PyTorch Lightning script,
a Hugging Face accelerate script, and a submitit-style entrypoint with a nested config dataclass."""
