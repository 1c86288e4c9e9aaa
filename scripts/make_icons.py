"""Render resources/icons/azr-trainer.svg to the PNG sizes the app and installers use.

    python scripts/make_icons.py
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "installer"))

from icons import render_pngs  # noqa: E402  (installer/ is a folder of scripts, not a package)

ICONS = ROOT / "resources" / "icons"
SIZES = (16, 24, 32, 48, 64, 128, 256, 512)


def main() -> int:
    for size, data in render_pngs(ICONS / "azr-trainer.svg", SIZES).items():
        out = ICONS / f"azr-trainer-{size}.png"
        out.write_bytes(data)
        print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
