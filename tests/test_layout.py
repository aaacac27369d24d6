"""The library never imports prefect: orchestration stays in tasks/ and flows/."""

from __future__ import annotations

import subprocess
import sys


def test_populora_core_does_not_import_prefect():
    code = (
        "import sys, pkgutil, importlib, populora_core\n"
        "for m in pkgutil.walk_packages(populora_core.__path__, 'populora_core.'):\n"
        "    if not m.name.endswith('.worker'):\n"
        "        importlib.import_module(m.name)\n"
        "assert 'prefect' not in sys.modules, 'populora_core imported prefect'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)
