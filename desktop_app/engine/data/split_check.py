"""Whether a share held out for validation holds out any document, said before a dataset is prepared (the Data tab's
note under "Held out for validation", prepare's warning) and after (an empty validation split in the manifest).

Each document's split is drawn by a seeded hash of its text (encode_items.split_of), so a share of the documents
holds out about share × documents of them: fewer than one, and most likely none is held out, and training then
measures no validation loss.
"""

from __future__ import annotations

import math
from typing import Any

MAX_SHARE = 0.5  # DataSpec.val_fraction's maximum


def share_for_one(documents: int) -> float | None:
    """The smallest share (in hundredths) that holds out about one of `documents`; None when even MAX_SHARE does
    not (a single document)."""
    if documents <= 0:
        return None
    share = math.ceil(100 / documents) / 100
    return share if share <= MAX_SHARE else None


def documents_for_one(share: float) -> int:
    """How many documents a share needs to hold out about one (share > 0)."""
    return math.ceil(1 / share - 1e-9)


def validation_shortfall(documents: int, share: float) -> str:
    """One sentence when `share` of `documents` holds out less than one document for validation (how many there
    are, and what share, or how many documents, gives one); "" when it holds out one or more, when nothing is asked
    to be held out (share 0) or when no documents are known."""
    if share <= 0 or documents <= 0 or documents * share >= 1:
        return ""
    noun = "document" if documents == 1 else "documents"
    more = f"add documents ({documents_for_one(share):,} or more at {share:g})"
    need = share_for_one(documents)
    how = f"hold out at least {need:g}, or {more}" if need else more
    part = f"{documents * share:.2g}"
    part = part if float(part) < 1 else f"{math.floor(documents * share * 1000) / 1000:g}"  # 0.9999: not "1"
    return (f"No validation loss: {share:g} of {documents:,} {noun} is {part}, less than one, so most likely none "
            f"is held out; {how}.")


def held_out_words(documents: int, share: float) -> str:
    """What `share` of `documents` holds out, in words, when it holds out some (or nothing is asked); "" for no
    documents. A share that holds out less than one is validation_shortfall's."""
    if documents <= 0:
        return ""
    if share <= 0:
        return "Nothing is held out for validation: training measures no validation loss."
    noun = "document" if documents == 1 else "documents"
    return f"{share:g} of {documents:,} {noun} holds out about {round(documents * share):,} for validation."


def empty_validation(manifest: dict[str, Any]) -> list[str]:
    """After a dataset is prepared: the sentence for a validation split that came out empty though a share was
    held out, when the share should have held out one or more (fewer was warned of before tokenizing)."""
    share = float(manifest["split"]["val_fraction"])
    val, train = manifest["splits"]["val"]["documents"], manifest["splits"]["train"]["documents"]
    if share <= 0 or val or not train or (val + train) * share < 1:
        return []
    return [f"the validation split came out empty: by chance, none of the {train:,} documents was drawn for it at "
            f"a share of {share:g}; a larger share or more documents give it some"]
