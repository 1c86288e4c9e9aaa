"""How the Get-a-model view writes numbers: sizes in MB/GB, speeds in MB/s, time left in minutes, parameter counts
and download counts as people read them on the Hub. Words only: what the numbers are comes from the engine."""

from __future__ import annotations


def size_words(n: float) -> str:
    """Bytes in decimal units, as download sizes are written: "1.2 GB", "340 MB", "12 kB", "512 bytes"."""
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            value = n / scale
            return f"{value:.1f} {unit}" if value < 100 else f"{value:.0f} {unit}"
    return f"{int(n)} bytes"


def speed_words(bytes_per_s: float) -> str:
    """A download speed: "2.1 MB/s"; "" when nothing is known yet."""
    return f"{size_words(bytes_per_s)}/s" if bytes_per_s > 0 else ""


def time_left_words(seconds: float) -> str:
    """"about 3 min left", "about 20 s left", "about 1 h 5 min left"; "" when unknown (negative)."""
    if seconds < 0:
        return ""
    if seconds < 60:
        return f"about {max(1, round(seconds))} s left"
    minutes = round(seconds / 60)
    if minutes < 60:
        return f"about {minutes} min left"
    hours, minutes = divmod(minutes, 60)
    return f"about {hours} h {minutes} min left" if minutes else f"about {hours} h left"


def parameters_words(n: int) -> str:
    """A parameter count as the Hub writes it: "494M", "1.2B", "135M"; "unknown" for 0."""
    if n <= 0:
        return "unknown"
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            value = n / scale
            return f"{value:.1f}{unit}".replace(".0" + unit, unit) if value < 10 else f"{value:.0f}{unit}"
    return str(n)


def count_words(n: int) -> str:
    """A download or like count: "1,234", "12.3K", "4.5M"."""
    if n >= 1e6:
        return f"{n / 1e6:.1f}M"
    if n >= 1e4:
        return f"{n / 1e3:.1f}K"
    return f"{n:,}"


def date_words(iso: str) -> str:
    """The date part of an ISO time ("2024-09-25T10:00:00Z" -> "2024-09-25"); "unknown" when empty."""
    return iso[:10] if iso else "unknown"


def progress_words(done: int, total: int, speed: float, eta_s: float) -> str:
    """One line of a download's progress: "120 MB of 1.2 GB · 2.1 MB/s · about 3 min left"."""
    parts = [f"{size_words(done)} of {size_words(total)}" if total > 0 else size_words(done),
             speed_words(speed), time_left_words(eta_s)]
    return " · ".join(p for p in parts if p)
