"""Build the installers: `python installer/build.py [--smoke]`.

1. renders the app icon into .png/.ico/.icns (build/icons),
2. runs PyInstaller on installer/azr_trainer.spec -> dist/azr-trainer/ (one folder; macOS: the .app),
3. packages for the platform it runs on:
     Linux   dist/*.tar.gz and dist/*.deb (dpkg-deb), an AppImage only if `appimagetool` is on PATH
     Windows build/windows/*.iss (Inno Setup, generated from pyproject.toml) -> dist/*-setup.exe if ISCC
             is installed, plus a portable .zip
     macOS   dist/*.dmg (hdiutil) of the .app
4. with --smoke: installs the package into a scratch root (Linux: `dpkg-deb -x`) and runs the
   *installed* app headless (installer/smoke.py): --version, the window offscreen (time to window), every
   CLI verb (prepare, train, generate, model, sandbox, tasks, selfplay-demo, serve, export), one-line user
   errors and self-play started from the Train tab; it fails if anything was written into the install folder.

Figures (sizes, build time, time to window frozen vs from source) are printed and written to
build/build-report.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import build_config as cfg
import icons
import smoke

ROOT = cfg.REPO_ROOT
SPEC = cfg.INSTALLER_DIR / "azr_trainer.spec"
IS_LINUX = sys.platform.startswith("linux")
IS_WIN = sys.platform.startswith("win")
IS_MAC = sys.platform == "darwin"


def log(msg: str) -> None:
    print(f"[build] {msg}", flush=True)


def mib(n: float) -> str:
    return f"{n / 2**20:,.1f} MiB"


def tree_size(path: Path) -> int:
    """Bytes of regular files under path (symlinks counted as links, not followed)."""
    if path.is_file():
        return path.stat().st_size
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            p = os.path.join(dirpath, name)
            if not os.path.islink(p):
                total += os.path.getsize(p)
    return total


def run(cmd: Sequence[str | os.PathLike[str]], **kw) -> subprocess.CompletedProcess:
    log("$ " + " ".join(str(c) for c in cmd))
    return subprocess.run([str(c) for c in cmd], check=True, **kw)


def host_arch() -> str:
    """Architecture spelling for artifact names: x86_64/aarch64 on Linux, x64/arm64 on Windows and macOS."""
    machine = platform.machine().lower()
    if IS_LINUX:
        return machine
    return {"amd64": "x64", "x86_64": "x64", "aarch64": "arm64"}.get(machine, machine)


# ---------------------------------------------------------------------------------------------------
# 1. icons


def ensure_icons(out_dir: Path) -> dict[str, Path]:
    source = icons.find_source(ROOT / "resources")
    if source is None:
        raise SystemExit("no app icon: add resources/icons/azr-trainer.svg (or a PNG) - the installers need one")
    paths = icons.make_icons(source, out_dir)
    log(f"icons from {source.relative_to(ROOT)} -> {out_dir}")
    return paths


# ---------------------------------------------------------------------------------------------------
# 2. PyInstaller


def run_pyinstaller(*, dist: Path, work: Path, variant: str, trim: bool, icon_dir: Path, clean: bool) -> float:
    env = dict(os.environ, AZR_BUILD_VARIANT=variant, AZR_BUILD_TRIM="1" if trim else "0",
               AZR_ICON_DIR=str(icon_dir))
    cmd = [sys.executable, "-m", "PyInstaller", str(SPEC), "--noconfirm", "--log-level", "WARN",
           "--distpath", str(dist), "--workpath", str(work / "pyinstaller")]
    if clean:
        cmd.append("--clean")
    start = time.perf_counter()
    run(cmd, env=env, cwd=ROOT)
    return time.perf_counter() - start


def bundle_path(dist: Path) -> Path:
    if IS_MAC:
        return dist / f"{cfg.DISPLAY_NAME}.app"
    return dist / cfg.EXE_NAME


# ---------------------------------------------------------------------------------------------------
# 3. packages


def _copytree_linked(src: Path, dst: Path) -> None:
    """Copy a tree, hard-linking files where the filesystem allows (the bundle is ~750 MB)."""

    def link_or_copy(s: str, d: str) -> str:
        try:
            os.link(s, d)
        except OSError:
            shutil.copy2(s, d)
        return d

    shutil.copytree(src, dst, symlinks=True, copy_function=link_or_copy)


def make_tarball(bundle: Path, out: Path, top: str) -> Path:
    log(f"tar.gz -> {out.name}")
    with tarfile.open(out, "w:gz", compresslevel=6) as tar:
        tar.add(bundle, arcname=top)
    return out


def make_deb(meta: cfg.AppMeta, bundle: Path, icon_paths: dict[str, Path], out: Path, *, stage: Path,
             variant: str, compression: str) -> Path:
    layout = cfg.deb_layout(meta)
    if stage.exists():
        shutil.rmtree(stage)
    app_dir = stage / layout["app_dir"]
    app_dir.parent.mkdir(parents=True)
    _copytree_linked(bundle, app_dir)

    launcher = stage / layout["launcher"]
    launcher.parent.mkdir(parents=True)
    os.symlink(layout["launcher_target"], launcher)

    desktop = stage / layout["desktop_file"]
    desktop.parent.mkdir(parents=True)
    desktop.write_text(cfg.desktop_entry(meta), encoding="utf-8")

    icon_root = stage / layout["icon_dir"]
    icon_dir_src = icon_paths["png"].parent
    for size in cfg.LINUX_ICON_SIZES:
        src = icon_dir_src / f"app-{size}.png"
        if src.is_file():
            dst = icon_root / f"{size}x{size}" / "apps" / f"{meta.name}.png"
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
    if "svg" in icon_paths:
        dst = icon_root / "scalable" / "apps" / f"{meta.name}.svg"
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(icon_paths["svg"], dst)

    doc = stage / layout["doc_dir"]
    doc.mkdir(parents=True)
    (doc / "copyright").write_text(cfg.deb_copyright(meta), encoding="utf-8")

    debian = stage / "DEBIAN"
    debian.mkdir()
    installed_kib = (tree_size(stage) + 1023) // 1024
    (debian / "control").write_text(
        cfg.deb_control(meta, arch=platform.machine(), installed_size_kib=installed_kib, variant=variant),
        encoding="utf-8")
    for name, text in (("postinst", cfg.DEB_POSTINST), ("postrm", cfg.DEB_POSTRM)):
        (debian / name).write_text(text, encoding="utf-8")
        (debian / name).chmod(0o755)
    for d in [stage, *[p for p in stage.rglob("*") if p.is_dir() and not p.is_symlink()]]:
        d.chmod(0o755)

    log(f"deb -> {out.name} ({compression})")
    # gzip -6 instead of dpkg-deb's default -9: ~2x faster on ~800 MB, ~1% larger.
    level = ["-z6"] if compression == "gzip" else []
    run(["dpkg-deb", "--root-owner-group", f"-Z{compression}", *level, "--build", stage, out],
        stdout=subprocess.DEVNULL)
    return out


def make_appimage(meta: cfg.AppMeta, bundle: Path, icon_paths: dict[str, Path], out: Path, stage: Path) -> Path | None:
    tool = shutil.which("appimagetool")
    if not tool:
        log("AppImage skipped: `appimagetool` is not on PATH (Debian has no package for it and the PyPI "
            "AppImage tools download it at run time; the CI workflow fetches it on its Ubuntu runner)")
        return None
    if stage.exists():
        shutil.rmtree(stage)
    _copytree_linked(bundle, stage / "opt" / meta.name)
    (stage / "AppRun").write_text(
        f'#!/bin/sh\nHERE="$(dirname "$(readlink -f "$0")")"\nexec "$HERE/opt/{meta.name}/{meta.exe_name}" "$@"\n',
        encoding="utf-8")
    (stage / "AppRun").chmod(0o755)
    (stage / f"{meta.name}.desktop").write_text(cfg.desktop_entry(meta, exec_path=meta.exe_name), encoding="utf-8")
    shutil.copy2(icon_paths["png"], stage / f"{meta.name}.png")
    run([tool, "--no-appstream", stage, out], env=dict(os.environ, ARCH=platform.machine()))
    return out


def make_windows_installer(meta: cfg.AppMeta, bundle: Path, icon_paths: dict[str, Path], names: dict[str, str],
                           dist: Path, work: Path) -> dict[str, Path]:
    out: dict[str, Path] = {}
    iss = work / "windows" / f"{meta.name}.iss"
    iss.parent.mkdir(parents=True, exist_ok=True)
    iss.write_text(cfg.inno_setup_script(meta, source_dir=str(bundle.resolve()), output_dir=str(dist.resolve()),
                                         icon_file=str(icon_paths["ico"].resolve()),
                                         output_base_name=names["setup.exe"]), encoding="utf-8")
    out["iss"] = iss
    log(f"Inno Setup script -> {iss}")
    iscc = shutil.which("iscc") or shutil.which("ISCC")
    for candidate in (r"C:\Program Files (x86)\Inno Setup 6\ISCC.exe", r"C:\Program Files\Inno Setup 6\ISCC.exe"):
        if not iscc and Path(candidate).is_file():
            iscc = candidate
    if iscc:
        run([iscc, "/Q", iss])
        out["setup.exe"] = dist / f"{names['setup.exe']}.exe"
    else:
        log("setup.exe skipped: Inno Setup's ISCC.exe not found (choco install innosetup)")
    zip_base = dist / names["zip"].removesuffix(".zip")
    out["zip"] = Path(shutil.make_archive(str(zip_base), "zip", root_dir=bundle.parent, base_dir=bundle.name))
    return out


def make_dmg(meta: cfg.AppMeta, app: Path, out: Path, stage: Path) -> Path:
    if stage.exists():
        shutil.rmtree(stage)
    stage.mkdir(parents=True)
    shutil.copytree(app, stage / app.name, symlinks=True)
    os.symlink("/Applications", stage / "Applications")
    if out.exists():
        out.unlink()
    run(["hdiutil", "create", "-volname", meta.display_name, "-srcfolder", stage, "-fs", "HFS+",
         "-format", "UDZO", "-ov", out])
    return out


# ---------------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--smoke", action="store_true", help="install the package into a scratch root and run it headless")
    p.add_argument("--variant", choices=cfg.VARIANTS, default=os.environ.get("AZR_BUILD_VARIANT", "cpu"),
                   help="cpu (default) or cuda: which torch is in the environment; cpu drops CUDA-only libraries")
    p.add_argument("--no-trim", action="store_true", help="keep everything PyInstaller collects (size comparisons)")
    p.add_argument("--skip-build", action="store_true", help="reuse dist/ from an earlier build (package/smoke only)")
    p.add_argument("--no-packages", action="store_true", help="only the PyInstaller folder, no .deb/.tar.gz/...")
    p.add_argument("--smoke-only", action="store_true", help="smoke-test the bundle and packages already in dist/ "
                   "(no build, no packaging)")
    p.add_argument("--clean", action="store_true", help="empty PyInstaller's cache first")
    p.add_argument("--dist", type=Path, default=ROOT / "dist", help="output folder (default dist/)")
    p.add_argument("--work", type=Path, default=ROOT / "build", help="work folder (default build/)")
    p.add_argument("--deb-compression", choices=("gzip", "xz", "zstd", "none"), default="gzip",
                   help="dpkg-deb compressor (gzip: fast, readable by every dpkg)")
    p.add_argument("--repeats", type=int, default=3, help="--smoke-test runs per side for time to window")
    p.add_argument("--keep-scratch", action="store_true", help="leave the smoke test's scratch folder")
    p.add_argument("--smoke-steps", nargs="+", default=(), metavar="STEP", choices=[n for n, _ in smoke.STEPS],
                   help="run only these smoke steps (default: all): " + ", ".join(n for n, _ in smoke.STEPS))
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    meta = cfg.load_metadata()
    if cfg.package_version() != meta.version:
        raise SystemExit(f"version mismatch: pyproject.toml {meta.version} vs desktop_app {cfg.package_version()}")
    dist, work = args.dist.resolve(), args.work.resolve()
    dist.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    names = cfg.artifact_names(meta, arch=host_arch(), variant=args.variant)
    report: dict[str, object] = {"name": meta.name, "version": meta.version, "variant": args.variant,
                                 "trim": not args.no_trim, "platform": sys.platform, "machine": platform.machine(),
                                 "python": platform.python_version()}
    log(f"{meta.display_name} {meta.version} ({args.variant}, {'untrimmed' if args.no_trim else 'trimmed'})")

    icon_paths = ensure_icons(work / "icons")
    bundle = bundle_path(dist)
    if args.smoke_only:
        args.smoke, args.skip_build = True, True
    if not args.skip_build:
        report["build_s"] = round(run_pyinstaller(dist=dist, work=work, variant=args.variant, trim=not args.no_trim,
                                                  icon_dir=work / "icons", clean=args.clean), 1)
        log(f"PyInstaller took {report['build_s']} s")
        trim_report = work / "pyinstaller" / SPEC.stem / "trim-report.json"
        if trim_report.is_file():
            tr = json.loads(trim_report.read_text(encoding="utf-8"))
            report["trim_dropped_files"] = len(tr["dropped"])
            report["trim_dropped_bytes"] = tr["dropped_bytes"]
    if not bundle.exists():
        raise SystemExit(f"no bundle at {bundle}: build first (without --skip-build)")
    report["bundle_bytes"] = tree_size(bundle)
    log(f"bundle {bundle}: {mib(report['bundle_bytes'])}")

    packages: dict[str, Path] = {}
    if args.smoke_only:
        packages = {k: dist / names[k] for k in ("tar.gz", "deb", "AppImage", "dmg") if (dist / names[k]).is_file()}
        report["packages"] = {k: {"path": str(p), "bytes": p.stat().st_size} for k, p in packages.items()}
    elif not args.no_packages:
        t0 = time.perf_counter()
        if IS_LINUX:
            packages["tar.gz"] = make_tarball(bundle, dist / names["tar.gz"], f"{meta.name}-{meta.version}")
            packages["deb"] = make_deb(meta, bundle, icon_paths, dist / names["deb"], stage=work / "deb-root",
                                       variant=args.variant, compression=args.deb_compression)
            appimage = make_appimage(meta, bundle, icon_paths, dist / names["AppImage"], work / "AppDir")
            if appimage:
                packages["AppImage"] = appimage
        elif IS_WIN:
            packages.update(make_windows_installer(meta, bundle, icon_paths, names, dist, work))
        elif IS_MAC:
            packages["dmg"] = make_dmg(meta, bundle, dist / names["dmg"], work / "dmg")
        report["packaging_s"] = round(time.perf_counter() - t0, 1)
        report["packages"] = {k: {"path": str(p), "bytes": p.stat().st_size} for k, p in packages.items()}
        for kind, p in packages.items():
            log(f"{kind}: {p.name} {mib(p.stat().st_size)}")

    code = 0
    if args.smoke:
        scratch = Path(tempfile.mkdtemp(prefix="azr-smoke-"))
        t0 = time.perf_counter()
        try:
            if IS_LINUX and "deb" in packages:
                root = scratch / "root"
                run(["dpkg-deb", "-x", packages["deb"], root])
                layout = cfg.deb_layout(meta)
                exe = root / layout["launcher"]  # through the /usr/bin symlink, as a user would start it
                install_root = root / layout["app_dir"]
                if not (root / layout["desktop_file"]).is_file():
                    raise smoke.SmokeFailure("the .deb has no .desktop entry")
            elif IS_MAC:
                exe, install_root = bundle / "Contents" / "MacOS" / cfg.EXE_NAME, bundle
            else:
                exe, install_root = bundle / (cfg.EXE_NAME + (".exe" if IS_WIN else "")), bundle
            report["smoke"] = smoke.run_smoke(meta, exe=exe, install_root=install_root, scratch=scratch,
                                              repeats=args.repeats, only=args.smoke_steps)
            report["smoke_passed"] = True
            log("smoke test passed")
        except smoke.SmokeFailure as exc:
            report["smoke"] = getattr(exc, "figures", report.get("smoke"))
            report["smoke_passed"] = False
            report["smoke_error"] = str(exc)
            log(f"SMOKE TEST FAILED: {exc}")
            code = 1
        finally:
            report["smoke_total_s"] = round(time.perf_counter() - t0, 1)  # unpacking the .deb included
            if args.keep_scratch:
                log(f"scratch kept at {scratch}")
            else:
                shutil.rmtree(scratch, ignore_errors=True)

    (work / "build-report.json").write_text(json.dumps(report, indent=1, default=str), encoding="utf-8")
    print_summary(report, work / "build-report.json")
    return code


def print_summary(report: dict[str, object], report_path: Path) -> None:
    print("\n=== AZR Model Trainer build summary ===")
    if "build_s" in report:
        print(f"PyInstaller build time : {report['build_s']} s")
    print(f"bundle (one folder)    : {mib(report['bundle_bytes'])}")
    if "trim_dropped_bytes" in report:
        print(f"trimmed from the TOC   : {report['trim_dropped_files']} files, {mib(report['trim_dropped_bytes'])}")
    for kind, info in (report.get("packages") or {}).items():
        print(f"{kind:<23}: {mib(info['bytes'])}  {Path(info['path']).name}")
    smoke_figures = report.get("smoke")
    if isinstance(smoke_figures, dict):
        print_smoke_summary(smoke_figures)
    if "smoke_passed" in report:
        print(f"smoke test             : {'PASSED' if report['smoke_passed'] else 'FAILED'}")
    print(f"report                 : {report_path}")


def print_smoke_summary(figures: dict[str, object]) -> None:
    steps = figures.get("steps") or {}
    window = (steps.get("window") or {})
    for label in ("frozen", "source"):
        w = window.get(label)
        if isinstance(w, dict):
            print(f"time to window, {label} : {w['median_process_to_window_s']:.2f} s from launch "
                  f"({w['median_app_reported_s']:.2f} s app figure, {w['median_process_wall_s']:.2f} s whole run; "
                  f"median of {len(w['process_wall_s'])})")
    for name, record in steps.items():
        if name == "window":
            continue
        what = "passed" if record.get("passed") else "FAILED: " + str(record.get("error", "")).splitlines()[0][:100]
        print(f"smoke {name:<17}: {what} ({record.get('step_s')} s)")
    if "smoke_s" in figures:
        print(f"smoke time             : {figures['smoke_s']} s")
    missing = figures.get("missing_libraries") or {}
    if missing:  # system libraries the bundle expects from the target (the .deb's Depends/Recommends)
        names = sorted({name for names in missing.values() for name in names})
        print(f"unresolved libraries   : {', '.join(names)} (needed by {len(missing)} bundled objects; "
              "see build-report.json)")


if __name__ == "__main__":
    sys.exit(main())
