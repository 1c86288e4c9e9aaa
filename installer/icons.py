"""One app icon -> the per-platform files: PNGs (Linux hicolor), .ico (Windows), .icns (macOS).

The source is `resources/icons/azr-trainer.svg` (or the largest PNG there; the window uses the
`azr-trainer-<size>.png` files). Rendering uses Qt (PySide6 is in the build
environment anyway); packing .ico and .icns is plain Python, so it needs no Pillow and no macOS tools,
and the containers hold PNG images, which every supported Windows and macOS version reads.
"""

from __future__ import annotations

import struct
from pathlib import Path

ICO_SIZES = (16, 24, 32, 48, 64, 128, 256)
# ICNS PNG-capable element types by pixel size (the @2x types reuse the larger pixel sizes).
ICNS_TYPES = (
    (b"icp4", 16),
    (b"icp5", 32),
    (b"icp6", 64),
    (b"ic07", 128),
    (b"ic08", 256),
    (b"ic09", 512),
    (b"ic10", 1024),
    (b"ic11", 32),  # 16@2x
    (b"ic12", 64),  # 32@2x
    (b"ic13", 256),  # 128@2x
    (b"ic14", 512),  # 256@2x
)
ALL_SIZES = tuple(sorted({*ICO_SIZES, *(s for _, s in ICNS_TYPES), 512}))

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_size(data: bytes) -> tuple[int, int]:
    """Width and height from a PNG's IHDR chunk."""
    if data[:8] != PNG_SIGNATURE or data[12:16] != b"IHDR":
        raise ValueError("not a PNG image")
    return struct.unpack(">II", data[16:24])


def ico_bytes(pngs: dict[int, bytes]) -> bytes:
    """A .ico whose entries are PNG images (Windows Vista+), one per size in `pngs` (<= 256 px)."""
    sizes = sorted(s for s in pngs if s <= 256)
    if not sizes:
        raise ValueError("an .ico needs at least one image of 256 px or less")
    header = struct.pack("<HHH", 0, 1, len(sizes))
    offset = 6 + 16 * len(sizes)
    entries, blobs = b"", b""
    for size in sizes:
        data = pngs[size]
        if png_size(data) != (size, size):
            raise ValueError(f"image for {size} px is {png_size(data)}")
        dim = 0 if size == 256 else size  # 0 means 256 in the directory entry
        entries += struct.pack("<BBBBHHII", dim, dim, 0, 0, 1, 32, len(data), offset + len(blobs))
        blobs += data
    return header + entries + blobs


def icns_bytes(pngs: dict[int, bytes]) -> bytes:
    """A .icns with PNG elements for every ICNS type whose pixel size is in `pngs`."""
    body = b""
    for ostype, size in ICNS_TYPES:
        if size in pngs:
            data = pngs[size]
            if png_size(data) != (size, size):
                raise ValueError(f"image for {size} px is {png_size(data)}")
            body += ostype + struct.pack(">I", 8 + len(data)) + data
    if not body:
        raise ValueError("an .icns needs at least one image of a size ICNS knows")
    return b"icns" + struct.pack(">I", 8 + len(body)) + body


def find_source(resources: Path) -> Path | None:
    """The app icon in resources/icons: an SVG if there is one, else the largest PNG."""
    folder = resources / "icons"
    for name in ("azr-trainer.svg", "app.svg", "icon.svg"):
        if (folder / name).is_file():
            return folder / name
    pngs = sorted(folder.glob("*.png"), key=lambda p: p.stat().st_size, reverse=True) if folder.is_dir() else []
    return pngs[0] if pngs else None


def render_pngs(source: Path, sizes: tuple[int, ...] = ALL_SIZES) -> dict[int, bytes]:
    """Render the source icon at each size with Qt (offscreen; no display needed)."""
    import os

    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import QBuffer, QByteArray, QIODevice, QRectF, Qt
    from PySide6.QtGui import QGuiApplication, QImage, QPainter

    _app = QGuiApplication.instance() or QGuiApplication([])
    renderer = None
    original = None
    if source.suffix.lower() == ".svg":
        from PySide6.QtSvg import QSvgRenderer

        renderer = QSvgRenderer(str(source))
        if not renderer.isValid():
            raise ValueError(f"{source}: not a valid SVG")
    else:
        original = QImage(str(source))
        if original.isNull():
            raise ValueError(f"{source}: not an image Qt can read")
    out: dict[int, bytes] = {}
    for size in sizes:
        image = QImage(size, size, QImage.Format.Format_ARGB32)
        image.fill(Qt.GlobalColor.transparent)
        painter = QPainter(image)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform)
        if renderer is not None:
            renderer.render(painter, QRectF(0, 0, size, size))
        else:
            scaled = original.scaled(size, size, Qt.AspectRatioMode.KeepAspectRatio,
                                     Qt.TransformationMode.SmoothTransformation)
            painter.drawImage((size - scaled.width()) // 2, (size - scaled.height()) // 2, scaled)
        painter.end()
        array = QByteArray()
        buffer = QBuffer(array)
        buffer.open(QIODevice.OpenModeFlag.WriteOnly)
        image.save(buffer, "PNG")
        buffer.close()
        out[size] = bytes(array.data())
    return out


def make_icons(source: Path, out_dir: Path) -> dict[str, Path]:
    """Write app.ico, app.icns, app.png (256) and app-<N>.png into out_dir; return their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    pngs = render_pngs(source)
    paths = {"ico": out_dir / "app.ico", "icns": out_dir / "app.icns", "png": out_dir / "app.png"}
    paths["ico"].write_bytes(ico_bytes(pngs))
    paths["icns"].write_bytes(icns_bytes(pngs))
    paths["png"].write_bytes(pngs[256])
    for size, data in pngs.items():
        (out_dir / f"app-{size}.png").write_bytes(data)
    if source.suffix.lower() == ".svg":
        paths["svg"] = source
    return paths
