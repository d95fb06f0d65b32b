"""run.py - the meson test 'python-client': checks that the Debian packages
the tests need are there (msgpack, pytest, mypy: failing, not skipping,
when they are not), then runs pytest -q on tests/."""
import os
import sys

missing = []
for mod, pkg in (("msgpack", "python3-msgpack"), ("pytest", "python3-pytest"),
                 ("mypy", "mypy")):           # test_api.py type-checks the package
    try:
        __import__(mod)
    except ImportError:
        missing.append((mod, pkg))
if missing:
    for mod, pkg in missing:
        sys.stderr.write(f"python-client: cannot import {mod}: "
                         f"install it with: apt-get install -y {pkg}\n")
    sys.exit(1)

import pytest  # noqa: E402

here = os.path.dirname(os.path.abspath(__file__))
sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", here] + sys.argv[1:]))
