"""Fast checks of the installer configuration (no PyInstaller build: that is `installer/build.py --smoke`).

What is tested: the version and names come from pyproject.toml; the generated .desktop entry, Debian
control file, maintainer scripts, Inno Setup script, Info.plist and VERSIONINFO are well formed; the
trim rules drop what they should and keep what the app needs; no module the app imports is excluded;
the .ico/.icns writers produce valid containers; a .deb built from a fake bundle has the agreed layout.
"""

from __future__ import annotations

import ast
import configparser
import email.parser
import importlib.util
import itertools
import json
import os
import plistlib
import shutil
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
INSTALLER = ROOT / "installer"


def _load(name: str):
    """Import installer/<name>.py by path (installer/ is not a package on sys.path)."""
    if str(INSTALLER) not in sys.path:
        sys.path.insert(0, str(INSTALLER))  # build.py imports its siblings by plain name
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, INSTALLER / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


cfg = _load("build_config")
icons = _load("icons")


@pytest.fixture(scope="module")
def meta():
    return cfg.load_metadata()


def _pyproject_version() -> str:
    import tomllib

    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]


# --- metadata -----------------------------------------------------------------------------------------


def test_metadata_comes_from_pyproject(meta) -> None:
    assert meta.version == _pyproject_version()
    assert meta.name == "azr-model-trainer"
    assert meta.description and meta.license
    import desktop_app

    # The app's --version and the installers must agree.
    assert desktop_app.__version__ == meta.version == cfg.package_version()


def test_metadata_errors_are_clear(tmp_path: Path) -> None:
    bad = tmp_path / "pyproject.toml"
    bad.write_text('[project]\nname = "x"\ndescription = "d"\n', encoding="utf-8")
    with pytest.raises(ValueError, match="version"):
        cfg.load_metadata(bad)
    bad.write_text('[project]\nname = "x"\nversion = "1"\ndescription = "d"\ndynamic = ["version"]\n',
                   encoding="utf-8")
    with pytest.raises(ValueError, match="static"):
        cfg.load_metadata(bad)


def test_metadata_reads_another_version(tmp_path: Path) -> None:
    other = tmp_path / "pyproject.toml"
    other.write_text('[project]\nname = "x"\nversion = "2.3.4rc1"\ndescription = "d"\n'
                     'license = "MIT"\n[project.urls]\nHomepage = "https://h.invalid"\n', encoding="utf-8")
    m = cfg.load_metadata(other)
    assert (m.version, m.license, m.homepage) == ("2.3.4rc1", "MIT", "https://h.invalid")
    assert "Version: 2.3.4~rc1" in cfg.deb_control(m, arch="x86_64", installed_size_kib=1)
    assert "AppVersion=2.3.4rc1" in _iss(m)
    assert cfg.info_plist(m)["CFBundleShortVersionString"] == "2.3.4"


@pytest.mark.parametrize(
    ("pep440", "debian"),
    [
        ("1.2.0", "1.2.0"),
        ("1.2.0rc1", "1.2.0~rc1"),
        ("1.2.0a2", "1.2.0~a2"),
        ("1.2.0b1", "1.2.0~b1"),
        ("1.2.0.dev3", "1.2.0~~dev3"),
        ("1.2.0rc1.dev2", "1.2.0~rc1~dev2"),
        ("1.2.0.post1", "1.2.0+post1"),
        ("1.2.0+local.7", "1.2.0+local.7"),
    ],
)
def test_debian_version(pep440: str, debian: str) -> None:
    assert cfg.debian_version(pep440) == debian


@pytest.mark.skipif(shutil.which("dpkg") is None, reason="dpkg not installed")
def test_debian_versions_sort_like_pep440() -> None:
    ordered = ["1.0.0.dev1", "1.0.0a1.dev1", "1.0.0a1", "1.0.0rc1", "1.0.0", "1.0.0.post1.dev1", "1.0.0.post1",
               "1.0.1"]
    debs = [cfg.debian_version(v) for v in ordered]
    for lower, higher in itertools.pairwise(debs):
        assert subprocess.run(["dpkg", "--compare-versions", lower, "lt", higher]).returncode == 0, (lower, higher)


def test_numeric_versions_and_bad_versions() -> None:
    assert cfg.windows_version("1.2") == "1.2.0.0"
    assert cfg.windows_version("1.2.3.4.5") == "1.2.3.4"
    assert cfg.mac_short_version("1.2.3rc1") == "1.2.3"
    with pytest.raises(ValueError, match="PEP 440"):
        cfg.debian_version("banana")
    with pytest.raises(ValueError, match="Debian architecture"):
        cfg.deb_arch("sparc-something")
    assert cfg.deb_arch("x86_64") == "amd64" and cfg.deb_arch("aarch64") == "arm64"


def test_artifact_names(meta) -> None:
    names = cfg.artifact_names(meta, arch="x86_64")
    assert names["deb"] == f"azr-model-trainer_{cfg.debian_version(meta.version)}_amd64.deb"
    assert names["tar.gz"].endswith("-linux-x86_64.tar.gz") and meta.version in names["tar.gz"]
    cuda = cfg.artifact_names(meta, arch="x86_64", variant="cuda")
    assert "-cuda-" in cuda["tar.gz"] and "+cuda_" in cuda["deb"]


# --- Linux ----------------------------------------------------------------------------------------------


def test_desktop_entry(meta) -> None:
    text = cfg.desktop_entry(meta)
    parser = configparser.ConfigParser(interpolation=None)
    parser.optionxform = str
    parser.read_string(text)
    entry = parser["Desktop Entry"]
    assert entry["Type"] == "Application"
    assert entry["Name"] == "AZR Model Trainer"
    assert entry["Exec"] == f"{cfg.LINUX_PREFIX}/{cfg.EXE_NAME}"
    assert entry["Icon"] == meta.name  # resolved through the hicolor theme
    assert entry["Terminal"] == "false"
    assert entry["Categories"].endswith(";")
    assert "{" not in text and "}" not in text


@pytest.mark.skipif(shutil.which("desktop-file-validate") is None, reason="desktop-file-utils not installed")
def test_desktop_entry_validates(meta, tmp_path: Path) -> None:
    path = tmp_path / f"{meta.name}.desktop"
    path.write_text(cfg.desktop_entry(meta), encoding="utf-8")
    result = subprocess.run(["desktop-file-validate", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_deb_control(meta) -> None:
    text = cfg.deb_control(meta, arch="x86_64", installed_size_kib=765432)
    fields = email.parser.Parser().parsestr(text)
    assert fields["Package"] == meta.name
    assert fields["Version"] == cfg.debian_version(meta.version)
    assert fields["Architecture"] == "amd64"
    assert fields["Installed-Size"] == "765432"
    assert "libgl1" in fields["Depends"] and "libxcb-cursor0" in fields["Recommends"]
    synopsis, *body = text.split("Description: ", 1)[1].splitlines()
    assert 0 < len(synopsis) < 80
    assert body and all(line.startswith(" ") for line in body)
    assert text.endswith("\n") and "\n\n" not in text  # one paragraph
    cuda = email.parser.Parser().parsestr(cfg.deb_control(meta, arch="x86_64", installed_size_kib=1, variant="cuda"))
    assert cuda["Version"].endswith("+cuda")


@pytest.mark.skipif(shutil.which("sh") is None, reason="no POSIX shell")
@pytest.mark.parametrize("script", ["DEB_POSTINST", "DEB_POSTRM"])
def test_maintainer_scripts_are_valid_sh(script: str, tmp_path: Path) -> None:
    text = getattr(cfg, script)
    assert text.startswith("#!/bin/sh\n")
    path = tmp_path / "s.sh"
    path.write_text(text, encoding="utf-8")
    assert subprocess.run(["sh", "-n", str(path)]).returncode == 0


def test_deb_launcher_symlink_points_into_opt(meta) -> None:
    layout = cfg.deb_layout(meta)
    launcher_dir = Path("/") / Path(layout["launcher"]).parent
    target = (launcher_dir / layout["launcher_target"]).resolve(strict=False)
    assert str(target) == f"{cfg.LINUX_PREFIX}/{cfg.EXE_NAME}"
    assert not layout["launcher_target"].startswith("/")  # relative: works in a scratch root too


# --- Windows / macOS ----------------------------------------------------------------------------------


def _iss(m) -> str:
    return cfg.inno_setup_script(m, source_dir=r"C:\b\dist\azr-trainer", output_dir=r"C:\b\dist",
                                 icon_file=r"C:\b\build\icons\app.ico", output_base_name="setup-x")


def _iss_sections(text: str) -> dict[str, list[str]]:
    sections: dict[str, list[str]] = {}
    current = None
    for line in text.split("\r\n"):
        if line.startswith("[") and line.endswith("]"):
            current = line[1:-1]
            sections[current] = []
        elif current and line and not line.startswith(";"):
            sections[current].append(line)
    return sections


def test_inno_setup_script(meta) -> None:
    text = _iss(meta)
    assert "\r\n" in text and "\n" not in text.replace("\r\n", "")  # Windows line endings throughout
    sections = _iss_sections(text)
    assert {"Setup", "Files", "Icons", "Run"} <= set(sections)
    setup = dict(line.split("=", 1) for line in sections["Setup"])
    assert setup["PrivilegesRequired"] == "lowest"  # per-user install, no admin rights
    assert setup["AppVersion"] == meta.version
    assert setup["DefaultDirName"].startswith("{autopf}")
    assert setup["VersionInfoVersion"] == cfg.windows_version(meta.version)
    assert setup["AppId"].startswith("{{") and len(setup["AppId"]) == 39  # "{{" + GUID + "}"
    icons_lines = "\n".join(sections["Icons"])
    assert "{group}\\AZR Model Trainer" in icons_lines and "{uninstallexe}" in icons_lines
    assert f"{{app}}\\{cfg.EXE_NAME}.exe" in icons_lines
    assert "recursesubdirs" in sections["Files"][0]


def test_inno_app_id_is_stable_across_versions(meta) -> None:
    from dataclasses import replace

    newer = replace(meta, version="9.9.9")
    assert cfg.inno_app_id(newer) == cfg.inno_app_id(meta)  # so an upgrade replaces the old install


def test_windows_version_file_parses(meta) -> None:
    text = cfg.windows_version_file(meta, exe_name="azr-trainer")
    captured: dict[str, object] = {}

    def record(kind: str):
        def make(*args, **kwargs):
            captured.setdefault(kind, []).append((args, kwargs))
            return (kind, args, kwargs)

        return make

    names = ["VSVersionInfo", "FixedFileInfo", "StringFileInfo", "StringTable", "StringStruct", "VarFileInfo",
             "VarStruct"]
    result = eval(text, {name: record(name) for name in names})  # the same evaluation PyInstaller does
    assert result[0] == "VSVersionInfo"
    ffi = captured["FixedFileInfo"][0][1]
    assert ffi["filevers"] == cfg.numeric_version(meta.version, 4)
    strings = {args[0]: args[1] for args, _ in captured["StringStruct"]}
    assert strings["ProductVersion"] == meta.version and strings["OriginalFilename"] == "azr-trainer.exe"


def test_info_plist(meta) -> None:
    plist = cfg.info_plist(meta)
    assert plist["CFBundleIdentifier"] == meta.bundle_id
    assert plist["CFBundleShortVersionString"] == cfg.mac_short_version(meta.version)
    assert plist["CFBundleVersion"] == meta.version
    assert plist["NSHighResolutionCapable"] is True
    assert plistlib.loads(plistlib.dumps(plist)) == plist  # serialisable as a real Info.plist


# --- trimming ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "dropped"),
    [
        ("torch/bin/torch_shm_manager", False),  # import torch fails without it
        ("torch/lib/libtorch_cpu.so", False),
        ("torch/lib/libtorch_python.so", False),
        ("torch/lib/libgomp.so.1", False),
        ("torch/lib/libc10.so", False),
        ("torch/bin/test_api", True),
        ("torch/bin/TCPStoreTest", True),
        ("torch/bin/protoc-3.13.0.0", True),
        ("torch/lib/libjitbackend_test.so", True),
        ("torch/include/ATen/ATen.h", True),
        ("torch/share/cmake/Torch/TorchConfig.cmake", True),
        ("torch/lib/libfoo.a", True),
        ("bitsandbytes/libbitsandbytes_cpu.so", False),
        ("bitsandbytes/libbitsandbytes_cuda126.so", True),
        ("bitsandbytes/libbitsandbytes_rocm64.so", True),
        ("PySide6/Qt/lib/libQt6Widgets.so.6", False),
        ("PySide6/Qt/lib/libQt6Svg.so.6", False),
        ("PySide6/Qt/plugins/platforms/libqoffscreen.so", False),
        ("PySide6/Qt/plugins/platforms/libqxcb.so", False),
        ("PySide6/Qt/plugins/imageformats/libqsvg.so", False),
        ("PySide6/Qt/lib/libQt6Quick.so.6", True),
        ("PySide6/Qt/lib/libQt6Qml.so.6", True),
        ("PySide6/Qt/translations/qtbase_de.qm", True),
        ("PySide6\\translations\\qtbase_de.qm", True),  # Windows layout and separators
        ("PySide6\\Qt6Quick.dll", True),
        ("PySide6\\Qt6Widgets.dll", False),
        ("resources/sample_corpus/README.txt", False),
        ("PySide6/Qt/plugins/platformthemes/libqgtk3.so", True),
        ("PySide6/Qt/plugins/platformthemes/libqxdgdesktopportal.so", False),
        ("libcairo.so.2", True),
        ("libcudart.so.13", True),
        ("libfontconfig.so.1", False),
        ("libxcb-cursor.so.0", False),
        ("libpython3.11.so.1.0", False),
        ("transformers/models/llama/modeling_llama.py", False),
    ],
)
def test_trim_rules_cpu(path: str, dropped: bool) -> None:
    assert (cfg.trim_reason(path, "cpu") is not None) is dropped, cfg.trim_reason(path, "cpu")


def test_trim_rules_cuda_keeps_cuda_libraries() -> None:
    assert cfg.trim_reason("bitsandbytes/libbitsandbytes_cuda126.so", "cuda") is None
    assert cfg.trim_reason("bitsandbytes/libbitsandbytes_rocm64.so", "cuda") is not None
    assert cfg.trim_reason("torch/bin/torch_shm_manager", "cuda") is None
    assert cfg.trim_reason("libcudart.so.12", "cuda") is None
    with pytest.raises(ValueError, match="variant"):
        cfg.trim_rules("tpu")


def test_exclude_lists_keep_what_the_app_needs() -> None:
    excluded = set(cfg.excluded_modules())
    assert cfg.excluded_modules(trim=False) == []
    for needed in ("PySide6.QtCore", "PySide6.QtGui", "PySide6.QtWidgets", "PySide6.QtSvg", "PySide6.QtOpenGL",
                   "PySide6.QtOpenGLWidgets", "torch", "sympy", "transformers", "tokenizers", "safetensors",
                   "peft", "jinja2", "pyqtgraph", "numpy", "setuptools"):
        assert needed not in excluded
    for unused in ("PySide6.QtWebEngineCore", "PySide6.QtQuick", "PySide6.QtQml", "PySide6.Qt3DCore",
                   "PySide6.QtMultimedia", "PySide6.QtCharts", "PySide6.QtPdf", "PySide6.QtSql",
                   "PySide6.QtTest", "tkinter", "matplotlib", "IPython", "pytest"):
        assert unused in excluded


def _imports_of(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def test_app_imports_nothing_the_bundle_excludes() -> None:
    """A colleague importing e.g. PySide6.QtTest in the app would break the frozen build: catch it here."""
    excluded = cfg.excluded_modules()
    offenders = []
    for path in (ROOT / "desktop_app").rglob("*.py"):
        for name in _imports_of(path):
            for ex in excluded:
                if name == ex or name.startswith(ex + "."):
                    offenders.append(f"{path.relative_to(ROOT)}: {name}")
    assert not offenders, offenders


# --- icons ------------------------------------------------------------------------------------------


def _png(size: int) -> bytes:
    """A minimal valid RGBA PNG of size x size (pure Python)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    raw = b"".join(b"\x00" + b"\x20\x60\xb0\xff" * size for _ in range(size))
    return (icons.PNG_SIGNATURE + chunk(b"IHDR", struct.pack(">IIBBBBB", size, size, 8, 6, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def test_ico_container() -> None:
    pngs = {s: _png(s) for s in (16, 32, 256, 512)}
    data = icons.ico_bytes(pngs)
    reserved, kind, count = struct.unpack("<HHH", data[:6])
    assert (reserved, kind, count) == (0, 1, 3)  # 512 is left out: .ico tops out at 256
    for i, size in enumerate((16, 32, 256)):
        w, h, _c, _r, planes, bpp, length, offset = struct.unpack("<BBBBHHII", data[6 + 16 * i: 22 + 16 * i])
        assert (w or 256, h or 256, planes, bpp) == (size, size, 1, 32)
        assert data[offset:offset + length] == pngs[size]


def test_icns_container() -> None:
    pngs = {s: _png(s) for s in (16, 32, 64, 128, 256, 512, 1024)}
    data = icons.icns_bytes(pngs)
    assert data[:4] == b"icns" and struct.unpack(">I", data[4:8])[0] == len(data)
    pos, seen = 8, {}
    while pos < len(data):
        kind, length = data[pos:pos + 4], struct.unpack(">I", data[pos + 4:pos + 8])[0]
        seen[kind] = icons.png_size(data[pos + 8:pos + length])[0]
        pos += length
    assert pos == len(data)
    assert seen[b"ic10"] == 1024 and seen[b"ic07"] == 128 and seen[b"ic11"] == 32


def test_icon_writers_reject_bad_input() -> None:
    with pytest.raises(ValueError, match="PNG"):
        icons.png_size(b"GIF89a...")
    with pytest.raises(ValueError, match="px"):
        icons.ico_bytes({32: _png(16)})
    with pytest.raises(ValueError, match="at least one"):
        icons.ico_bytes({512: _png(512)})
    with pytest.raises(ValueError, match="at least one"):
        icons.icns_bytes({20: _png(20)})


# --- spec, entry, build script, CI ------------------------------------------------------------------


def test_spec_and_entry_are_valid_python() -> None:
    spec = (INSTALLER / "azr_trainer.spec").read_text(encoding="utf-8")
    ast.parse(spec)
    assert "build_config" in spec and "trim_reason" in spec
    assert "datas=cfg.bundle_datas(root)" in spec and "*cfg.sandbox_hidden_imports(root)" in spec
    assert 'hide_console="hide-early"' in spec  # Windows: no console window from the Start menu
    entry = (INSTALLER / "entry.py").read_text(encoding="utf-8")
    assert "freeze_support()" in entry and "desktop_app.__main__" in entry
    hook = (INSTALLER / "hooks" / "hook-desktop_app.py").read_text(encoding="utf-8")
    assert 'collect_submodules("desktop_app")' in hook  # CLI verbs are imported by name
    assert '"peft"' in hook and '"bitsandbytes"' in hook  # lazily used features stay in the bundle


def test_build_script_options() -> None:
    build = _load("build")
    args = build.parse_args([])
    assert (args.smoke, args.variant, args.no_trim, args.deb_compression) == (False, "cpu", False, "gzip")
    args = build.parse_args(["--smoke", "--variant", "cuda", "--skip-build", "--smoke-steps", "sandbox", "serve"])
    assert args.smoke and args.variant == "cuda" and args.skip_build and args.smoke_steps == ["sandbox", "serve"]
    with pytest.raises(SystemExit):
        build.parse_args(["--smoke-steps", "no-such-step"])


# --- the sandbox's fork server in the bundle --------------------------------------------------------------


def test_the_zygote_source_ships_where_the_frozen_app_looks() -> None:
    from desktop_app.engine.sandbox import launch

    datas = cfg.bundle_datas()
    zygote = Path(launch.zygote_path())
    # launch.zygote_path() is <folder of launch.py>/zygote.py; frozen, that folder is sys._MEIPASS/<dest>
    dest = zygote.parent.relative_to(ROOT).as_posix()
    assert (str(zygote), dest) in datas and (str(ROOT / "resources"), "resources") in datas
    assert all(Path(src).exists() for src, _ in datas)
    assert cfg.trim_reason(f"{dest}/zygote.py") is None and cfg.trim_reason(f"{dest}/zygote.py", "cuda") is None


def test_the_fork_server_runtime_hook_runs_first_and_starts_the_zygote() -> None:
    spec = (INSTALLER / "azr_trainer.spec").read_text(encoding="utf-8")
    hook = INSTALLER / "rthooks" / "pyi_rth_azr_fork_server.py"
    assert 'runtime_hooks=[str(root / "installer" / "rthooks" / "pyi_rth_azr_fork_server.py")]' in spec
    if not hasattr(os, "fork"):
        return  # Windows: no fork server
    from desktop_app.engine.sandbox import launch

    # as the bootloader runs it: an isolated interpreter, the app importable, argv as the executor passes it
    code = (f"import sys; sys.path.insert(0, {str(ROOT)!r}); sys.argv = ['azr-trainer', {launch.FORK_SERVER_FLAG!r}]; "
            f"exec(compile(open({str(hook)!r}).read(), 'rthook', 'exec'))")
    done = subprocess.run([sys.executable, "-I", "-S", "-c", code], input='{"quit": true}\n', capture_output=True,
                          text=True, timeout=60, env={})
    assert done.returncode == 0, done.stderr[-2000:]
    hello = json.loads(done.stdout.splitlines()[0])["hello"]
    assert "audit-hook" in hello["layers"] and "isolated-interpreter" in hello["layers"], hello


def test_the_modules_untrusted_programs_may_import_are_bundled() -> None:
    from desktop_app.engine.sandbox import zygote

    hidden = cfg.sandbox_hidden_imports()
    assert hidden == list(zygote.ALLOWED_MODULES)
    assert all(name in sys.stdlib_module_names for name in hidden)
    assert not set(hidden) & set(cfg.excluded_modules())


# --- the smoke test ---------------------------------------------------------------------------------------


def test_the_smoke_runs_every_cli_verb() -> None:
    from desktop_app.cli import VERBS

    smoke = _load("smoke")
    source = (INSTALLER / "smoke.py").read_text(encoding="utf-8")
    names = [name for name, _ in smoke.STEPS]
    assert len(names) == len(set(names)) and {"window", "errors", "window-selfplay"} <= set(names)
    missing = sorted(set(VERBS) - set(smoke.STEP_VERBS))
    assert not missing, f"add a smoke step for {missing} to installer/smoke.py (STEPS and STEP_VERBS)"
    for verb in smoke.STEP_VERBS:  # each listed verb is really run by a step
        assert f'ctx.exe, "{verb}"' in source or f'"{verb}", ' in source, verb
    # steps that use what another makes come after it
    assert names.index("prepare") < names.index("train") < min(names.index(n) for n in (
        "generate", "serve", "export", "window-selfplay"))


def test_the_smoke_step_runner_records_each_result(tmp_path: Path, monkeypatch, meta) -> None:
    smoke = _load("smoke")
    (tmp_path / "app" / "_internal" / "resources" / "sample_corpus").mkdir(parents=True)

    def good(ctx):
        ctx.made["run"] = tmp_path
        return {"x": 1}

    def bad(ctx):
        raise smoke.SmokeFailure("nope")

    def needy(ctx):
        return {"run": str(ctx.needs("dataset"))}

    monkeypatch.setattr(smoke, "STEPS", (("good", good), ("bad", bad), ("needy", needy)))
    with pytest.raises(smoke.SmokeFailure) as caught:
        smoke.run_smoke(meta, exe=tmp_path / "app" / "azr-trainer", install_root=tmp_path / "app",
                        scratch=tmp_path / "scratch", repeats=1)
    figures = caught.value.figures
    assert figures["failed_steps"] == ["bad", "needy"] and figures["steps"]["good"]["x"] == 1
    assert figures["steps"]["bad"]["error"] == "nope" and "dataset" in figures["steps"]["needy"]["error"]
    assert figures["install_tree_unchanged"] is True and "smoke_s" in figures


def _fake_bundle(tmp_path: Path) -> tuple[Path, dict[str, Path]]:
    bundle = tmp_path / "dist" / cfg.EXE_NAME
    (bundle / "_internal" / "resources" / "sample_corpus").mkdir(parents=True)
    (bundle / "_internal" / "resources" / "sample_corpus" / "a.txt").write_text("hello\n", encoding="utf-8")
    exe = bundle / cfg.EXE_NAME
    exe.write_text("#!/bin/sh\necho fake\n", encoding="utf-8")
    exe.chmod(0o755)
    icon_dir = tmp_path / "icons"
    icon_dir.mkdir()
    for size in cfg.LINUX_ICON_SIZES:
        (icon_dir / f"app-{size}.png").write_bytes(_png(size))
    (icon_dir / "app.png").write_bytes(_png(256))
    return bundle, {"png": icon_dir / "app.png"}


@pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="dpkg-deb not installed")
def test_deb_layout_from_a_fake_bundle(meta, tmp_path: Path) -> None:
    build = _load("build")
    bundle, icon_paths = _fake_bundle(tmp_path)
    deb = build.make_deb(meta, bundle, icon_paths, tmp_path / "x.deb", stage=tmp_path / "stage", variant="cpu",
                         compression="gzip")
    info = subprocess.run(["dpkg-deb", "-f", str(deb)], capture_output=True, text=True, check=True).stdout
    assert f"Package: {meta.name}" in info and f"Version: {cfg.debian_version(meta.version)}" in info
    root = tmp_path / "root"
    subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True)
    layout = cfg.deb_layout(meta)
    launcher = root / layout["launcher"]
    assert launcher.is_symlink() and launcher.resolve() == (root / layout["app_dir"] / cfg.EXE_NAME).resolve()
    assert subprocess.run([str(launcher)], capture_output=True, text=True).stdout == "fake\n"
    assert (root / layout["desktop_file"]).read_text(encoding="utf-8") == cfg.desktop_entry(meta)
    assert (root / layout["icon_dir"] / "256x256" / "apps" / f"{meta.name}.png").is_file()
    assert (root / layout["app_dir"] / "_internal" / "resources" / "sample_corpus" / "a.txt").is_file()
    listing = subprocess.run(["dpkg-deb", "-c", str(deb)], capture_output=True, text=True, check=True).stdout
    assert "root/root" in listing and "./opt/azr-model-trainer/azr-trainer" in listing


def test_tarball_from_a_fake_bundle(meta, tmp_path: Path) -> None:
    import tarfile

    build = _load("build")
    bundle, _ = _fake_bundle(tmp_path)
    out = build.make_tarball(bundle, tmp_path / "x.tar.gz", f"{meta.name}-{meta.version}")
    with tarfile.open(out) as tar:
        names = tar.getnames()
    assert f"{meta.name}-{meta.version}/{cfg.EXE_NAME}" in names
    assert f"{meta.name}-{meta.version}/_internal/resources/sample_corpus/a.txt" in names


def test_ci_workflow_builds_all_three() -> None:
    yaml = pytest.importorskip("yaml")
    path = ROOT / ".github" / "workflows" / "installers.yml"
    workflow = yaml.safe_load(path.read_text(encoding="utf-8"))
    text = path.read_text(encoding="utf-8")
    job = next(iter(workflow["jobs"].values()))
    runners = {entry["os"] for entry in job["strategy"]["matrix"]["include"]}
    assert any(r.startswith("ubuntu") for r in runners)
    assert any(r.startswith("windows") for r in runners)
    assert any(r.startswith("macos") for r in runners)
    assert "installer/build.py" in text and "whl/cpu" in text and "upload-artifact" in text


def test_build_outputs_are_git_ignored() -> None:
    lines = {line.strip() for line in (ROOT / ".gitignore").read_text(encoding="utf-8").splitlines()}
    assert {"build/", "dist/"} <= lines or {"/build/", "/dist/"} <= lines


def test_icon_source_is_found(tmp_path: Path) -> None:
    assert icons.find_source(tmp_path) is None
    folder = tmp_path / "icons"
    folder.mkdir()
    (folder / "azr-trainer-16.png").write_bytes(_png(16))
    (folder / "azr-trainer-256.png").write_bytes(_png(256))
    assert icons.find_source(tmp_path).name == "azr-trainer-256.png"  # the largest PNG
    (folder / "azr-trainer.svg").write_text("<svg/>", encoding="utf-8")
    assert icons.find_source(tmp_path).name == "azr-trainer.svg"
    assert icons.find_source(ROOT / "resources") is not None  # the repository ships one
