"""What the installers are made of: app metadata, file templates and trim rules (stdlib only).

One source of truth shared by the PyInstaller spec (`azr_trainer.spec`), `build.py` and the unit tests:
the version and names come from `pyproject.toml`, so the .deb control file, the .desktop entry, the
Inno Setup script and the macOS Info.plist can never disagree with the Python package.
"""

from __future__ import annotations

import fnmatch
import platform
import re
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - the build machines run 3.11+; 3.10 needs the tomli backport
    import tomli as tomllib

REPO_ROOT = Path(__file__).resolve().parents[1]
INSTALLER_DIR = REPO_ROOT / "installer"

# Names that are not in pyproject.toml because they are packaging decisions, not package metadata.
DISPLAY_NAME = "AZR Model Trainer"
EXE_NAME = "azr-trainer"  # the one executable: window without arguments, CLI with a verb
BUNDLE_ID = "org.azr-model-trainer.AZRModelTrainer"
LINUX_PREFIX = "/opt/azr-model-trainer"
VARIANTS = ("cpu", "cuda")


@dataclass(frozen=True)
class AppMeta:
    """Package metadata as the installers need it."""

    name: str  # distribution name, also the Linux package / desktop-file id
    version: str  # PEP 440, exactly as in pyproject.toml
    description: str
    license: str
    homepage: str
    authors: tuple[str, ...]
    display_name: str = DISPLAY_NAME
    exe_name: str = EXE_NAME
    bundle_id: str = BUNDLE_ID
    keywords: tuple[str, ...] = field(default=("machine learning", "language model", "training", "pytorch"))

    @property
    def publisher(self) -> str:
        return ", ".join(self.authors) or self.display_name

    @property
    def maintainer(self) -> str:
        # Debian wants "Name <email>"; pyproject has no email, so a clearly non-routable placeholder.
        return f"{self.publisher} <noreply@{self.name}.invalid>"


def load_metadata(pyproject: Path | None = None) -> AppMeta:
    """Read name/version/description/... from pyproject.toml (the only place the version is written)."""
    path = pyproject or REPO_ROOT / "pyproject.toml"
    with open(path, "rb") as fh:
        project = tomllib.load(fh).get("project", {})
    missing = [key for key in ("name", "version", "description") if not project.get(key)]
    if missing:
        raise ValueError(f"{path}: [project] lacks {', '.join(missing)}")
    if "version" in project.get("dynamic", []):
        raise ValueError(f"{path}: the version must be static for the installers to read it")
    lic = project.get("license", "")
    lic_text = lic.get("text", "") if isinstance(lic, dict) else str(lic)
    urls = project.get("urls", {})
    homepage = urls.get("Homepage") or urls.get("homepage") or next(iter(urls.values()), "")
    authors = tuple(a.get("name") or a.get("email", "") for a in project.get("authors", []))
    return AppMeta(
        name=project["name"],
        version=str(project["version"]),
        description=project["description"],
        license=lic_text,
        homepage=homepage,
        authors=authors,
    )


# ---------------------------------------------------------------------------------------------------
# Version spellings per platform

_PEP440 = re.compile(
    r"^(?P<release>\d+(?:\.\d+)*)"
    r"(?:[-_.]?(?P<pre>a|b|rc|alpha|beta|c)[-_.]?(?P<pre_n>\d*))?"
    r"(?:[-_.]?post[-_.]?(?P<post>\d*))?"
    r"(?:[-_.]?dev[-_.]?(?P<dev>\d*))?"
    r"(?:\+(?P<local>[a-z0-9.]+))?$",
    re.IGNORECASE,
)


def _parse(version: str) -> re.Match[str]:
    match = _PEP440.match(version.strip())
    if not match:
        raise ValueError(f"version {version!r} is not a PEP 440 version the installers understand")
    return match


def debian_version(version: str) -> str:
    """PEP 440 -> Debian: pre-releases and dev builds sort *before* the release ("~")."""
    m = _parse(version)
    out = m["release"]
    if m["pre"]:
        pre = {"alpha": "a", "beta": "b", "c": "rc"}.get(m["pre"].lower(), m["pre"].lower())
        out += f"~{pre}{m['pre_n'] or 0}"
    if m["post"] is not None:
        out += f"+post{m['post'] or 0}"
    if m["dev"] is not None:
        # "~~" sorts before "~", so 1.0.dev1 < 1.0a1 as in PEP 440 (a plain "~dev" would sort after "~a").
        tilde = "~" if (m["pre"] or m["post"] is not None) else "~~"
        out += f"{tilde}dev{m['dev'] or 0}"
    if m["local"]:
        out += f"+{m['local']}"
    return out


def numeric_version(version: str, parts: int = 3) -> tuple[int, ...]:
    """The release numbers padded/truncated to `parts` (Windows VERSIONINFO wants 4, macOS 3)."""
    nums = [int(n) for n in _parse(version)["release"].split(".")]
    return tuple((nums + [0] * parts)[:parts])


def windows_version(version: str) -> str:
    return ".".join(str(n) for n in numeric_version(version, 4))


def mac_short_version(version: str) -> str:
    return ".".join(str(n) for n in numeric_version(version, 3))


def deb_arch(machine: str | None = None) -> str:
    machine = (machine or platform.machine()).lower()
    table = {"x86_64": "amd64", "amd64": "amd64", "x64": "amd64", "aarch64": "arm64", "arm64": "arm64",
             "armv7l": "armhf"}
    if machine not in table:
        raise ValueError(f"no Debian architecture known for machine {machine!r}")
    return table[machine]


# ---------------------------------------------------------------------------------------------------
# Artifact names


def artifact_names(meta: AppMeta, *, arch: str, variant: str = "cpu") -> dict[str, str]:
    suffix = "" if variant == "cpu" else f"-{variant}"
    deb_suffix = "" if variant == "cpu" else f"+{variant}"
    return {
        "tar.gz": f"{meta.name}-{meta.version}{suffix}-linux-{arch}.tar.gz",
        "deb": f"{meta.name}_{debian_version(meta.version)}{deb_suffix}_{deb_arch(arch)}.deb",
        "AppImage": f"{meta.name}-{meta.version}{suffix}-{arch}.AppImage",
        "setup.exe": f"{meta.name}-{meta.version}{suffix}-windows-{arch}-setup",  # Inno adds .exe
        "zip": f"{meta.name}-{meta.version}{suffix}-windows-{arch}.zip",
        "dmg": f"{meta.name}-{meta.version}{suffix}-macos-{arch}.dmg",
    }


# ---------------------------------------------------------------------------------------------------
# Linux: .desktop entry and Debian control files


def desktop_entry(meta: AppMeta, *, exec_path: str | None = None) -> str:
    exec_path = exec_path or f"{LINUX_PREFIX}/{meta.exe_name}"
    return (
        "[Desktop Entry]\n"
        "Type=Application\n"
        "Version=1.4\n"
        f"Name={meta.display_name}\n"
        "GenericName=Language Model Trainer\n"
        f"Comment={meta.description}\n"
        f"Exec={exec_path}\n"
        f"TryExec={exec_path}\n"
        f"Icon={meta.name}\n"
        "Terminal=false\n"
        "Categories=Science;ArtificialIntelligence;\n"
        f"Keywords={';'.join(meta.keywords)};\n"
        "StartupNotify=true\n"
    )


# Libraries the frozen Qt needs from the system. PyInstaller deliberately does not bundle libGL/libEGL,
# and the xcb platform plugin (Qt >= 6.5) dlopens libxcb-cursor; fonts come from fontconfig.
DEB_DEPENDS = (
    "libc6 (>= 2.34)",
    "libgl1",
    "libegl1",
    "libfontconfig1",
    "libxkbcommon0",
    "libdbus-1-3",
    "libglib2.0-0",
)
DEB_RECOMMENDS = (
    "libxcb-cursor0",
    "libxcb-icccm4",
    "libxcb-keysyms1",
    "libxcb-image0",
    "libxcb-render-util0",
    "libxcb-shape0",
    "libxcb-xkb1",
    "libxkbcommon-x11-0",
    "libwayland-client0",
    "fonts-dejavu-core",
)


def deb_synopsis(description: str, limit: int = 79) -> str:
    """Debian's one-line synopsis: under 80 characters, cut at a clause or word boundary."""
    text = " ".join(description.split()).rstrip(".")
    if len(text) <= limit:
        return text
    head = text[:limit]
    cut = head.rfind(", ")
    if cut < limit // 2:
        cut = head.rfind(" ")
    return head[:cut].rstrip(" ,;") if cut > 0 else head


def deb_control(meta: AppMeta, *, arch: str, installed_size_kib: int, variant: str = "cpu") -> str:
    version = debian_version(meta.version) + ("" if variant == "cpu" else f"+{variant}")
    summary = deb_synopsis(meta.description)
    body = meta.description if variant == "cpu" else f"{meta.description} (build with {variant.upper()} PyTorch)"
    lines = [
        f"Package: {meta.name}",
        f"Version: {version}",
        f"Architecture: {deb_arch(arch)}",
        f"Maintainer: {meta.maintainer}",
        f"Installed-Size: {int(installed_size_kib)}",
        f"Depends: {', '.join(DEB_DEPENDS)}",
        f"Recommends: {', '.join(DEB_RECOMMENDS)}",
        "Section: science",
        "Priority: optional",
    ]
    if meta.homepage:
        lines.append(f"Homepage: {meta.homepage}")
    lines.append(f"Description: {summary}")
    lines.append(f" {body}")
    lines.append(" .")
    lines.append(" Self-contained build: Python, PyTorch and Qt are bundled; nothing is downloaded")
    lines.append(f" at first start. Installs under {LINUX_PREFIX}; `{meta.exe_name}` runs the app or its CLI.")
    return "\n".join(lines) + "\n"


# Maintainer scripts only refresh desktop caches; the app itself needs no setup step.
DEB_POSTINST = """#!/bin/sh
set -e
if [ "$1" = "configure" ]; then
    command -v update-desktop-database >/dev/null 2>&1 && update-desktop-database -q /usr/share/applications || true
    command -v gtk-update-icon-cache >/dev/null 2>&1 && gtk-update-icon-cache -q -t /usr/share/icons/hicolor || true
fi
exit 0
"""

DEB_POSTRM = """#!/bin/sh
set -e
if [ "$1" = "remove" ] || [ "$1" = "purge" ]; then
    command -v update-desktop-database >/dev/null 2>&1 && update-desktop-database -q /usr/share/applications || true
    command -v gtk-update-icon-cache >/dev/null 2>&1 && gtk-update-icon-cache -q -t /usr/share/icons/hicolor || true
fi
exit 0
"""


def deb_copyright(meta: AppMeta) -> str:
    return (
        "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n"
        f"Upstream-Name: {meta.display_name}\n\n"
        "Files: *\n"
        f"Copyright: {meta.publisher}\n"
        f"License: {meta.license or 'see upstream'}\n"
        " The bundled third-party components (Python, PyTorch, Qt/PySide6, transformers, ...) keep their\n"
        " own licenses; their license files ship inside the bundle's _internal folder.\n"
    )


# Paths inside the .deb (relative to the package root). The launcher is a *relative* symlink so the
# same tree works when unpacked into a scratch root for the smoke test.
def deb_layout(meta: AppMeta) -> dict[str, str]:
    return {
        "app_dir": LINUX_PREFIX.lstrip("/"),
        "launcher": f"usr/bin/{meta.exe_name}",
        "launcher_target": f"../../{LINUX_PREFIX.lstrip('/')}/{meta.exe_name}",
        "desktop_file": f"usr/share/applications/{meta.name}.desktop",
        "icon_dir": "usr/share/icons/hicolor",
        "doc_dir": f"usr/share/doc/{meta.name}",
    }


LINUX_ICON_SIZES = (16, 32, 48, 64, 128, 256, 512)


# ---------------------------------------------------------------------------------------------------
# Windows: Inno Setup script


def inno_app_id(meta: AppMeta) -> str:
    # Stable across versions (derived from the package name) so upgrades replace the old install.
    return "{{" + str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{meta.name}.installer")).upper() + "}"


def inno_setup_script(
    meta: AppMeta,
    *,
    source_dir: str,
    output_dir: str,
    icon_file: str,
    output_base_name: str,
    arch: str = "x64",
) -> str:
    """An .iss for a per-user install (no admin rights), Start-menu entry and uninstaller."""
    gui_exe = f"{meta.exe_name}.exe"  # hides its own console when started from the Start menu
    lines = [
        "; Generated by installer/build.py from pyproject.toml - do not edit by hand.",
        "[Setup]",
        f"AppId={inno_app_id(meta)}",
        f"AppName={meta.display_name}",
        f"AppVersion={meta.version}",
        f"AppVerName={meta.display_name} {meta.version}",
        f"AppPublisher={meta.publisher}",
        f"AppPublisherURL={meta.homepage}",
        f"VersionInfoVersion={windows_version(meta.version)}",
        f"VersionInfoDescription={meta.display_name} installer",
        # {autopf} is %LOCALAPPDATA%\\Programs for a non-admin install.
        f"DefaultDirName={{autopf}}\\{meta.display_name}",
        f"DefaultGroupName={meta.display_name}",
        "DisableProgramGroupPage=yes",
        "PrivilegesRequired=lowest",
        "PrivilegesRequiredOverridesAllowed=dialog",
        f"ArchitecturesAllowed={arch}compatible",
        f"ArchitecturesInstallIn64BitMode={arch}compatible",
        f"OutputDir={output_dir}",
        f"OutputBaseFilename={output_base_name}",
        f"SetupIconFile={icon_file}",
        f"UninstallDisplayIcon={{app}}\\{gui_exe}",
        f"UninstallDisplayName={meta.display_name}",
        "Compression=lzma2/max",
        "SolidCompression=yes",
        "WizardStyle=modern",
        "",
        "[Languages]",
        'Name: "english"; MessagesFile: "compiler:Default.isl"',
        "",
        "[Tasks]",
        'Name: "desktopicon"; Description: "{cm:CreateDesktopIcon}"; '
        'GroupDescription: "{cm:AdditionalIcons}"; Flags: unchecked',
        "",
        "[Files]",
        f'Source: "{source_dir}\\*"; DestDir: "{{app}}"; Flags: ignoreversion recursesubdirs createallsubdirs',
        "",
        "[Icons]",
        f'Name: "{{group}}\\{meta.display_name}"; Filename: "{{app}}\\{gui_exe}"',
        f'Name: "{{group}}\\Uninstall {meta.display_name}"; Filename: "{{uninstallexe}}"',
        f'Name: "{{autodesktop}}\\{meta.display_name}"; Filename: "{{app}}\\{gui_exe}"; Tasks: desktopicon',
        "",
        "[Run]",
        f'Filename: "{{app}}\\{gui_exe}"; Description: "{{cm:LaunchProgram,{meta.display_name}}}"; '
        "Flags: nowait postinstall skipifsilent",
        "",
        "[UninstallDelete]",
        # Only what the bundle itself may leave in {app}; the user's workspace lives elsewhere and stays.
        'Type: filesandordirs; Name: "{app}\\_internal\\__pycache__"',
        "",
    ]
    return "\r\n".join(lines)


# ---------------------------------------------------------------------------------------------------
# macOS: Info.plist values for PyInstaller's BUNDLE


def info_plist(meta: AppMeta) -> dict[str, object]:
    return {
        "CFBundleName": meta.display_name,
        "CFBundleDisplayName": meta.display_name,
        "CFBundleIdentifier": meta.bundle_id,
        "CFBundleShortVersionString": mac_short_version(meta.version),
        "CFBundleVersion": meta.version,
        "CFBundlePackageType": "APPL",
        "LSApplicationCategoryType": "public.app-category.developer-tools",
        "LSMinimumSystemVersion": "11.0",
        "NSHighResolutionCapable": True,
        "NSRequiresAquaSystemAppearance": False,
        "NSHumanReadableCopyright": f"{meta.publisher}. {meta.license}".strip(". "),
    }


# ---------------------------------------------------------------------------------------------------
# Trimming: Python modules left out of the analysis, and files dropped from the collected TOC

# Qt modules a tabbed widgets + pyqtgraph app never imports. Excluding the Python module keeps PyInstaller's
# Qt hooks from collecting its libraries, QML files and plugins.
EXCLUDED_QT_MODULES = tuple(
    f"PySide6.{name}"
    for name in (
        "Qt3DAnimation", "Qt3DCore", "Qt3DExtras", "Qt3DInput", "Qt3DLogic", "Qt3DRender",
        "QtBluetooth", "QtCharts", "QtConcurrent", "QtDataVisualization", "QtDesigner", "QtGraphs",
        "QtGraphsWidgets", "QtHelp", "QtHttpServer", "QtLocation", "QtMultimedia", "QtMultimediaWidgets",
        "QtNetworkAuth", "QtNfc", "QtPdf", "QtPdfWidgets", "QtPositioning", "QtQml", "QtQuick", "QtQuick3D",
        "QtQuickControls2", "QtQuickTest", "QtQuickWidgets", "QtRemoteObjects", "QtScxml", "QtSensors",
        "QtSerialBus", "QtSerialPort", "QtSpatialAudio", "QtSql", "QtStateMachine", "QtTest",
        "QtTextToSpeech", "QtUiTools", "QtWebChannel", "QtWebEngineCore", "QtWebEngineQuick",
        "QtWebEngineWidgets", "QtWebSockets", "QtWebView", "QtXml",
    )
)  # fmt: skip

# Packages present in a dev environment that the app never uses (test tools, notebooks, other Qt bindings).
EXCLUDED_PACKAGES = (
    "tkinter", "_tkinter", "turtledemo", "idlelib",
    "matplotlib", "IPython", "ipykernel", "jupyter_client", "notebook",
    "pytest", "_pytest", "pytestqt", "pytest_timeout", "pluggy", "iniconfig",
    "PyQt5", "PyQt6", "PySide2",
    "pyqtgraph.examples", "pyqtgraph.jupyter", "pyqtgraph.opengl",
    "PyInstaller", "ruff",
    "hf_xet",  # huggingface_hub's Xet accelerator (11 MB): the app's pulls use plain HTTP (engine/hub/download.py)
)  # fmt: skip


def excluded_modules(trim: bool = True) -> list[str]:
    return [*EXCLUDED_QT_MODULES, *EXCLUDED_PACKAGES] if trim else []


# The sandbox's fork server: a frozen app runs this file's source as its own isolated interpreter
# (desktop_app/engine/sandbox/launch.py), next to where the module would be, so it ships as a data file.
SANDBOX_DIR = "desktop_app/engine/sandbox"
ZYGOTE_FILE = f"{SANDBOX_DIR}/zygote.py"


def bundle_datas(root: Path | None = None) -> list[tuple[str, str]]:
    """(source, folder in the bundle) of every data file the spec adds: resources/ (sample corpus, icons;
    desktop_app.engine.paths looks in sys._MEIPASS/resources) and the zygote's source."""
    root = root or REPO_ROOT
    return [(str(root / "resources"), "resources"), (str(root / ZYGOTE_FILE), SANDBOX_DIR)]


def sandbox_hidden_imports(root: Path | None = None) -> list[str]:
    """The modules untrusted programs may import (zygote.ALLOWED_MODULES, all stdlib): the zygote imports
    them by name in a loop, which PyInstaller's scan cannot follow."""
    import ast

    tree = ast.parse(((root or REPO_ROOT) / ZYGOTE_FILE).read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "ALLOWED_MODULES":
            return list(ast.literal_eval(node.value))
    raise ValueError(f"{ZYGOTE_FILE} has no ALLOWED_MODULES")


# Files dropped from the collected binaries/datas, as globs on the path inside the bundle ("/" separated).
# torch: C++ headers, CMake files, static libs, test binaries and test-only libraries. torch_shm_manager
# must stay (import torch fails without it).
_TRIM_ALWAYS = (
    ("torch/include/*", "torch C++ headers"),
    ("torch/share/*", "torch CMake files"),
    ("torch/test/*", "torch C++ tests"),
    ("torch/bin/*test*", "torch test binaries"),
    ("torch/bin/*Test", "torch test binaries"),
    ("torch/bin/protoc*", "protobuf compiler"),
    ("torch/bin/*.pt", "torch test data"),
    ("torch/bin/*.ptl", "torch test data"),
    ("torch/lib/libjitbackend_test*", "torch test library"),
    ("torch/lib/libtorchbind_test*", "torch test library"),
    ("torch/lib/libbackend_with_compiler*", "torch test library"),
    ("torch/lib/libaoti_custom_ops*", "torch test library"),
    ("*.a", "static library"),
    ("*.lib", "static/import library"),
    ("*.h", "C header"),
    ("*.hpp", "C++ header"),
    ("*.cuh", "CUDA header"),
    ("*.pyi", "type stub"),
    # PySide6 keeps Qt under PySide6/Qt/ on Linux and macOS, directly under PySide6/ on Windows.
    ("PySide6/*translations/*", "Qt translations (the app is English only)"),
    ("PySide6/*plugins/imageformats/*qpdf*", "PDF image plugin (needs QtPdf)"),
    ("PySide6/*plugins/designer/*", "Qt Designer plugins"),
    ("PySide6/*plugins/qmltooling/*", "QML tooling"),
    ("PySide6/*plugins/qmllint/*", "QML tooling"),
    ("PySide6/*plugins/sqldrivers/*", "SQL drivers"),
    # The GTK3 platform theme only works against the system's GTK; bundled, it drags in a private
    # GTK/cairo/pango stack (~6 MB) that can clash with the system's. Qt falls back to its own style.
    ("PySide6/*plugins/platformthemes/*gtk3*", "GTK3 theme plugin"),
    ("libatk-1.0.so*", "GTK stack (only for the GTK3 theme plugin)"),
    ("libcairo*.so*", "GTK stack (only for the GTK3 theme plugin)"),
    ("libpango*.so*", "GTK stack (only for the GTK3 theme plugin)"),
    ("libgdk_pixbuf*.so*", "GTK stack (only for the GTK3 theme plugin)"),
    ("libharfbuzz.so*", "GTK stack (only for the GTK3 theme plugin)"),
    ("libgraphite2.so*", "GTK stack (only for the GTK3 theme plugin)"),
    ("libfribidi.so*", "GTK stack (only for the GTK3 theme plugin)"),
    ("libthai.so*", "GTK stack (only for the GTK3 theme plugin)"),
    ("libdatrie.so*", "GTK stack (only for the GTK3 theme plugin)"),
    ("libpixman-1.so*", "GTK stack (only for the GTK3 theme plugin)"),
    ("PySide6/*qml/*", "QML modules"),
    ("*/libQt6Quick*", "QtQuick library"),
    ("*/libQt6Qml*", "QML library"),
    ("*/libQt6Pdf*", "QtPdf library"),
    ("*/libQt6Designer*", "Qt Designer library"),
    ("*/Qt6Quick*.dll", "QtQuick library"),
    ("*/Qt6Qml*.dll", "QML library"),
    ("*/Qt6Pdf*.dll", "QtPdf library"),
    ("*/QtQuick*.framework/*", "QtQuick framework"),
    ("*/QtQml*.framework/*", "QML framework"),
    ("*/QtPdf*.framework/*", "QtPdf framework"),
    ("bitsandbytes/*rocm*", "bitsandbytes ROCm library"),
    ("bitsandbytes/*xpu*", "bitsandbytes XPU library"),
    ("bitsandbytes/*hip*", "bitsandbytes HIP library"),
)
_TRIM_CPU_ONLY = (
    ("libcudart*", "CUDA runtime (CPU build; pulled in by bitsandbytes' CUDA libraries)"),
    ("cudart64*.dll", "CUDA runtime (CPU build)"),
    ("bitsandbytes/*cuda*", "bitsandbytes CUDA library (CPU build)"),
    ("bitsandbytes/*mps*", "bitsandbytes MPS library (CPU build)"),
)
# Never dropped, whatever the globs above say.
KEEP_ALWAYS = ("torch/bin/torch_shm_manager", "torch/bin/torch_shm_manager.exe")


def trim_rules(variant: str = "cpu") -> tuple[tuple[str, str], ...]:
    if variant not in VARIANTS:
        raise ValueError(f"unknown build variant {variant!r}; choose one of {', '.join(VARIANTS)}")
    return _TRIM_ALWAYS + (_TRIM_CPU_ONLY if variant == "cpu" else ())


def trim_reason(dest_name: str, variant: str = "cpu") -> str | None:
    """Why a file at `dest_name` (path inside the bundle) is dropped, or None to keep it."""
    path = dest_name.replace("\\", "/")
    if path in KEEP_ALWAYS:
        return None
    for pattern, reason in trim_rules(variant):
        if fnmatch.fnmatchcase(path, pattern) or fnmatch.fnmatchcase(path.lower(), pattern.lower()):
            return reason
    return None


def windows_version_file(meta: AppMeta, *, exe_name: str) -> str:
    """PyInstaller's VERSIONINFO resource (the 'Details' tab of the .exe's properties on Windows)."""
    nums = numeric_version(meta.version, 4)

    def s(key: str, value: str) -> str:
        return f"StringStruct({key!r}, {value!r})"

    strings = ",\n            ".join(
        [
            s("CompanyName", meta.publisher),
            s("FileDescription", meta.display_name),
            s("FileVersion", meta.version),
            s("InternalName", exe_name),
            s("LegalCopyright", f"{meta.publisher}. {meta.license}".strip(". ")),
            s("OriginalFilename", f"{exe_name}.exe"),
            s("ProductName", meta.display_name),
            s("ProductVersion", meta.version),
        ]
    )
    return (
        "VSVersionInfo(\n"
        f"  ffi=FixedFileInfo(filevers={nums}, prodvers={nums}, mask=0x3f, flags=0x0, OS=0x40004,\n"
        "                    fileType=0x1, subtype=0x0, date=(0, 0)),\n"
        "  kids=[\n"
        "    StringFileInfo([StringTable('040904B0', [\n"
        f"            {strings}])]),\n"
        "    VarFileInfo([VarStruct('Translation', [1033, 1200])])\n"
        "  ]\n"
        ")\n"
    )


def package_version(root: Path | None = None) -> str | None:
    """`__version__` as written in desktop_app/__init__.py (checked against pyproject by the build)."""
    text = ((root or REPO_ROOT) / "desktop_app" / "__init__.py").read_text(encoding="utf-8")
    match = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", text, re.MULTILINE)
    return match.group(1) if match else None
