"""Only what pyproject.toml cannot say: the shipped profiles and jobs.

They live at the checkout's top level (`cluster_profiles/`, `jobs/`: where `python submit.py` and
the README point); in a wheel they become package data inside the packages that read them
(`launcher/cluster_profiles/`, `trainer/jobs/`), found by `trainer.config.lookup.shipped_dir`.
"""

from setuptools import find_packages, setup

SHIPPED = {"launcher.cluster_profiles": "cluster_profiles", "trainer.jobs": "jobs"}

setup(
    packages=find_packages(include=["trainer", "trainer.*", "launcher", "launcher.*"]) + list(SHIPPED),
    package_dir=SHIPPED,
    package_data={name: ["*.yaml"] for name in SHIPPED},
)
