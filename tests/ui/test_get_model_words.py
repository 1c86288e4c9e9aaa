"""How the Get-a-model view writes sizes, speeds, time left and counts: words with units, as a person reads them."""

from __future__ import annotations

import pytest

from desktop_app.ui.widgets.hub_words import (
    count_words,
    date_words,
    parameters_words,
    progress_words,
    size_words,
    speed_words,
    time_left_words,
)


@pytest.mark.parametrize(("n", "text"), [(512, "512 bytes"), (12_300, "12.3 kB"), (2_100_000, "2.1 MB"),
                                         (340_000_000, "340 MB"), (1_240_000_000, "1.2 GB"), (4.2e12, "4.2 TB")])
def test_sizes_are_in_decimal_units(n, text):
    assert size_words(n) == text


def test_speed_and_time_left_are_words_and_empty_when_unknown():
    assert speed_words(2_100_000) == "2.1 MB/s" and speed_words(0) == ""
    assert time_left_words(-1) == "" and time_left_words(0.2) == "about 1 s left"
    assert time_left_words(20) == "about 20 s left" and time_left_words(170) == "about 3 min left"
    assert time_left_words(3900) == "about 1 h 5 min left" and time_left_words(7200) == "about 2 h left"


def test_one_progress_line_says_bytes_speed_and_time_left():
    line = progress_words(120_000_000, 1_200_000_000, 2_100_000, 180)
    assert line == "120 MB of 1.2 GB · 2.1 MB/s · about 3 min left"
    assert progress_words(5_000, 0, 0, -1) == "5.0 kB"  # nothing known but the bytes


@pytest.mark.parametrize(("n", "text"), [(0, "unknown"), (135_000_000, "135M"), (494_032_768, "494M"),
                                         (1_235_814_400, "1.2B"), (1_000_000_000, "1B"), (8_030_000_000, "8B"),
                                         (70_550_000_000, "71B"), (950, "950")])
def test_parameter_counts_read_as_on_the_hub(n, text):
    assert parameters_words(n) == text


def test_counts_and_dates():
    assert count_words(950) == "950" and count_words(9_999) == "9,999" and count_words(12_345) == "12.3K"
    assert count_words(4_500_000) == "4.5M"
    assert date_words("2024-09-25T10:00:00.000Z") == "2024-09-25" and date_words("") == "unknown"
