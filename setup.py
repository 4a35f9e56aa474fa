"""Package layout: the design card's top-level folders install under the one name ``kvprobe``.

``extract/``, ``interventions/``, ``readouts/`` and ``studies/`` become ``kvprobe.extract``,
``kvprobe.interventions``, ``kvprobe.readouts`` and ``kvprobe.studies`` (regular and editable
installs), so a user's environment gains no generic top-level ``studies`` or ``extract``.
Everything else is in pyproject.toml.
"""

from setuptools import find_packages, setup

#: Top-level folder -> the subpackage of ``kvprobe`` it installs as.
MAPPED_FOLDERS = {"extract": "kvprobe.extract", "interventions": "kvprobe.interventions",
                  "readouts": "kvprobe.readouts", "studies": "kvprobe.studies"}

packages = find_packages(include=["kvprobe", "kvprobe.*"])
package_dir = {}
for folder, name in MAPPED_FOLDERS.items():
    package_dir[name] = folder
    packages += [name] + [f"{name}.{sub}" for sub in find_packages(folder)]

setup(packages=packages, package_dir=package_dir)
