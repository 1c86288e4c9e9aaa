"""A deterministic generator of varied, learnable English-like text (the embedded sample corpus).

Stdlib only and seeded, so `python -m desktop_app.engine.data.sample_corpus OUT_DIR` always writes the
same bytes. The text is made from small grammars: short stories with consistent characters, facts
about animals, colours and places, dialogues, arithmetic and simple lists. It is varied enough that a
tiny model's loss keeps falling for a long time, and regular enough that the curve drops visibly
within a minute on a CPU. Documents are separated by blank lines (the dataset pipeline's boundary).
No downloaded text is used.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Callable
from pathlib import Path

from desktop_app.engine.paths import sample_corpus_dir

SEED = 20240611
NAMES = ["Anna", "Ben", "Clara", "Dan", "Ella", "Finn", "Grace", "Hugo", "Ivy", "Jack", "Kira", "Leo", "Mia",
         "Noah", "Olga", "Pablo", "Quinn", "Rosa", "Sam", "Tara", "Umar", "Vera", "Will", "Xena", "Yuki", "Zoe",
         "Lily", "Max", "Nina", "Omar"]
ANIMALS = {  # animal: (sound, food, home, ability)
    "cat": ("meows", "fish", "house", "climb trees"), "dog": ("barks", "bones", "kennel", "run fast"),
    "cow": ("moos", "grass", "barn", "give milk"), "duck": ("quacks", "seeds", "pond", "swim"),
    "owl": ("hoots", "mice", "tree", "see at night"), "frog": ("croaks", "flies", "pond", "jump far"),
    "horse": ("neighs", "hay", "stable", "carry people"), "sheep": ("baas", "grass", "field", "grow wool"),
    "bee": ("buzzes", "nectar", "hive", "make honey"), "lion": ("roars", "meat", "savanna", "hunt"),
    "mouse": ("squeaks", "cheese", "hole", "hide"), "pig": ("oinks", "apples", "sty", "dig in mud"),
    "bird": ("sings", "worms", "nest", "fly"), "fox": ("yelps", "berries", "den", "sneak"),
    "bear": ("growls", "honey", "cave", "sleep all winter"), "fish": ("blubs", "bugs", "river", "swim"),
    "goat": ("bleats", "leaves", "hill", "climb rocks"), "rabbit": ("thumps", "carrots", "burrow", "hop"),
    "turtle": ("hisses", "lettuce", "shell", "live long"), "whale": ("sings", "krill", "ocean", "dive deep"),
}
ADJECTIVES = ["little", "big", "happy", "sleepy", "brave", "shy", "clever", "funny", "kind", "curious", "tiny",
              "old", "young", "quiet", "loud", "gentle", "hungry", "busy", "lucky", "proud"]
COLOURS = ["red", "blue", "green", "yellow", "orange", "purple", "pink", "brown", "white", "black", "grey"]
OBJECTS = ["ball", "kite", "book", "hat", "box", "key", "cup", "map", "drum", "shoe", "boat", "bell", "lamp",
           "coin", "stone", "flower", "cake", "letter", "rope", "basket"]
PLACES = ["park", "forest", "garden", "village", "beach", "market", "school", "farm", "river", "mountain",
          "town", "lake", "meadow", "library", "castle"]
FEELINGS = ["happy", "sad", "excited", "scared", "tired", "proud", "surprised", "calm", "angry", "glad"]
WEATHER = ["sunny", "rainy", "windy", "cold", "warm", "cloudy", "snowy", "foggy"]
TIMES = ["morning", "afternoon", "evening", "night"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
FOODS = ["apples", "bread", "soup", "rice", "cheese", "eggs", "milk", "pears", "beans", "cookies", "tea", "jam"]
NUMBER_WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
                "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen", "twenty"]
COUNTRIES = {"France": "Paris", "Italy": "Rome", "Spain": "Madrid", "Japan": "Tokyo", "Egypt": "Cairo",
             "Canada": "Ottawa", "Brazil": "Brasilia", "Kenya": "Nairobi", "India": "New Delhi", "Peru": "Lima",
             "Norway": "Oslo", "Greece": "Athens", "Chile": "Santiago", "Poland": "Warsaw", "Ghana": "Accra"}
THINGS_COLOUR = {"the sky": "blue", "grass": "green", "snow": "white", "a banana": "yellow", "coal": "black",
                 "a carrot": "orange", "a tomato": "red", "chocolate": "brown", "a plum": "purple", "ash": "grey"}


def _a(word: str) -> str:
    return ("an " if word[0] in "aeiou" else "a ") + word


def story(r: random.Random) -> str:
    hero, friend = r.sample(NAMES, 2)
    animal = r.choice(list(ANIMALS))
    sound, food, home, ability = ANIMALS[animal]
    adj, obj, place = r.choice(ADJECTIVES), r.choice(OBJECTS), r.choice(PLACES)
    colour, weather, time = r.choice(COLOURS), r.choice(WEATHER), r.choice(TIMES)
    s = [r.choice([
        f"Once upon a time, there was {_a(adj)} {animal} named {hero}.",
        f"There was once {_a(adj)} {animal} called {hero}.",
        f"{hero} was {_a(adj)} {animal} who lived in a {home} near the {place}.",
    ])]
    s.append(r.choice([
        f"{hero} lived in a {home} near the {place}.",
        f"Every day, {hero} ate {food} and played in the {place}.",
        f"{hero} liked to {ability} and to eat {food}.",
        f"When {hero} was happy, {hero} {sound}.",
    ]))
    s.append(r.choice([
        f"One {weather} {time}, {hero} found {_a(colour)} {obj} in the {place}.",
        f"One {time}, the weather was {weather}, and {hero} saw {_a(colour)} {obj}.",
        f"On {r.choice(DAYS)}, {hero} went to the {place} and found {_a(obj)}.",
    ]))
    feeling = r.choice(FEELINGS)
    s.append(r.choice([
        f"{hero} felt {feeling}. \"What a nice {obj}!\" said {hero}.",
        f"\"Look, a {obj}!\" {hero} said. {hero} was very {feeling}.",
        f"{hero} did not know what to do with the {obj}, so {hero} asked {friend} for help.",
    ]))
    s.append(r.choice([
        f"{friend} the {r.choice(list(ANIMALS))} came to see it. \"Can I play too?\" asked {friend}.",
        f"Then {friend} came by. {friend} wanted the {obj} too.",
        f"Soon {friend} arrived. {friend} said, \"Let us share the {obj}.\"",
    ]))
    s.append(r.choice([
        f"So {hero} and {friend} played with the {obj} until it was {r.choice(TIMES)}.",
        f"{hero} shared the {obj} with {friend}, and they became good friends.",
        f"They took the {obj} to the {r.choice(PLACES)} and had a lot of fun.",
        f"But the {obj} fell into the {r.choice(['river', 'lake', 'pond', 'mud'])}. {hero} and {friend} "
        f"worked together and got it back.",
    ]))
    s.append(r.choice([
        f"In the end, {hero} was {r.choice(['happy', 'glad', 'proud', 'tired but happy'])}.",
        "The end.",
        f"From that day on, {hero} always shared with friends.",
        f"That night, {hero} went back to the {home} and slept well.",
    ]))
    return " ".join(s)


def fact(r: random.Random) -> str:
    kind = r.randrange(5)
    lines = []
    if kind == 0:
        for animal in r.sample(list(ANIMALS), r.randint(2, 4)):
            sound, food, home, ability = ANIMALS[animal]
            lines.append(r.choice([
                f"A {animal} {sound}. A {animal} eats {food}. A {animal} lives in a {home}.",
                f"The {animal} can {ability}. It likes to eat {food}.",
                f"What does a {animal} eat? A {animal} eats {food}.",
                f"Where does a {animal} live? A {animal} lives in a {home}.",
            ]))
    elif kind == 1:
        for thing in r.sample(list(THINGS_COLOUR), r.randint(2, 4)):
            lines.append(r.choice([f"The colour of {thing} is {THINGS_COLOUR[thing]}.",
                                   f"What colour is {thing}? It is {THINGS_COLOUR[thing]}."]))
    elif kind == 2:
        for country in r.sample(list(COUNTRIES), r.randint(2, 4)):
            lines.append(r.choice([f"The capital of {country} is {COUNTRIES[country]}.",
                                   f"{COUNTRIES[country]} is the capital city of {country}."]))
    elif kind == 3:
        i = r.randrange(7)
        lines.append(f"The day after {DAYS[i]} is {DAYS[(i + 1) % 7]}. The day before {DAYS[i]} is "
                     f"{DAYS[(i - 1) % 7]}.")
        lines.append(f"There are seven days in a week. {DAYS[(i + 3) % 7]} comes three days after {DAYS[i]}.")
    else:
        n = r.randint(0, 19)
        lines.append(f"The number {NUMBER_WORDS[n]} is written {n}. The next number is {NUMBER_WORDS[n + 1]}, "
                     f"which is written {n + 1}.")
        lines.append(f"{n} is {'even' if n % 2 == 0 else 'odd'}, and {n + 1} is {'even' if n % 2 else 'odd'}.")
    return " ".join(lines)


def dialogue(r: random.Random) -> str:
    a, b = r.sample(NAMES, 2)
    food, place, weather = r.choice(FOODS), r.choice(PLACES), r.choice(WEATHER)
    lines = [f"{a}: {r.choice(['Hello', 'Hi', 'Good morning', 'Hey'])}, {b}! How are you?",
             f"{b}: I am {r.choice(FEELINGS)}, thank you. And you?",
             f"{a}: I am fine. It is {weather} today."]
    topic = r.randrange(3)
    if topic == 0:
        lines += [f"{b}: Do you want to go to the {place}?",
                  f"{a}: {r.choice(['Yes, let us go!', 'Not today, I am busy.', 'Maybe later.'])}"]
    elif topic == 1:
        n = r.randint(2, 9)
        lines += [f"{b}: How many {food} do we need?", f"{a}: We need {NUMBER_WORDS[n]} {food}.",
                  f"{b}: I have {NUMBER_WORDS[n - 1]}. I will buy one more."]
    else:
        x, y = r.randint(1, 9), r.randint(1, 9)
        lines += [f"{b}: What is {x} plus {y}?", f"{a}: {x} plus {y} is {x + y}.",
                  f"{b}: {r.choice(['Right!', 'Correct!', 'Well done!'])}"]
    lines.append(f"{b}: {r.choice(['Goodbye', 'See you later', 'Bye'])}, {a}!")
    return "\n".join(lines)


def arithmetic(r: random.Random) -> str:
    out = []
    for _ in range(r.randint(3, 6)):
        op = r.randrange(4)
        x, y = r.randint(0, 20), r.randint(0, 20)
        if op == 0:
            out.append(f"{x} plus {y} is {x + y}.")
        elif op == 1:
            x, y = max(x, y), min(x, y)
            out.append(f"{x} minus {y} is {x - y}.")
        elif op == 2:
            x, y = x % 11, y % 11
            out.append(f"{x} times {y} is {x * y}.")
        else:
            y = y % 10 + 1
            out.append(f"{x * y} divided by {y} is {x}.")
    return " ".join(out)


def simple_list(r: random.Random) -> str:
    kind = r.randrange(4)
    if kind == 0:
        items = r.sample(FOODS, r.randint(3, 6))
        return f"{r.choice(NAMES)}'s shopping list: " + ", ".join(items[:-1]) + f" and {items[-1]}."
    if kind == 1:
        start = r.randint(0, 10)
        step = r.randint(1, 3)
        nums = [start + step * i for i in range(r.randint(4, 8))]
        return f"Counting by {step} from {start}: " + ", ".join(map(str, nums)) + "."
    if kind == 2:
        start = r.randint(0, 12)
        words = NUMBER_WORDS[start:start + r.randint(3, 8)]
        return "Counting: " + ", ".join(words) + "."
    day = r.randrange(7)
    return "The days of the week: " + ", ".join(DAYS[day:] + DAYS[:day]) + "."


FILES: dict[str, tuple[Callable[[random.Random], str], int]] = {
    # file: (document maker, target size in bytes)
    "stories.txt": (story, 700_000),
    "facts.txt": (fact, 300_000),
    "dialogues.txt": (dialogue, 300_000),
    "numbers_and_lists.txt": (lambda r: arithmetic(r) if r.random() < 0.6 else simple_list(r), 200_000),
}

README = """# Sample corpus

Generated text (no downloaded data) so a new user can train a model without bringing files.
Made by `python -m desktop_app.engine.data.sample_corpus resources/sample_corpus` (deterministic, seed {seed}):
small grammars produce short stories with consistent characters, facts (animals, colours, capitals,
days, numbers), dialogues, arithmetic and simple lists. Documents are separated by blank lines.

Files: {files}.
"""


def generate(seed: int = SEED) -> dict[str, str]:
    """{file name: text}, identical for the same seed."""
    out = {}
    for i, (name, (maker, size)) in enumerate(FILES.items()):
        r = random.Random(seed * 100 + i)
        docs: list[str] = []
        total = 0
        while total < size:
            doc = maker(r)
            docs.append(doc)
            total += len(doc) + 2
        out[name] = "\n\n".join(docs) + "\n"
    return out


def write_corpus(folder: str | Path, seed: int = SEED) -> list[Path]:
    """Write the corpus files into `folder` and a description beside it (`<folder>.md`, so dropping the
    folder into the app ingests only the text); returns the text files."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    texts = generate(seed)
    for name, text in texts.items():
        path = folder / name
        path.write_text(text, encoding="utf-8", newline="\n")
        paths.append(path)
    listing = ", ".join(f"{n} ({len(t.encode()) // 1000} kB)" for n, t in texts.items())
    folder.with_suffix(".md").write_text(README.format(seed=seed, files=listing), encoding="utf-8", newline="\n")
    return paths


def sample_corpus_files() -> list[Path]:
    """The embedded corpus's text files (without its README)."""

    return sorted(sample_corpus_dir().glob("*.txt"))


if __name__ == "__main__":
    target = sys.argv[1] if len(sys.argv) > 1 else "resources/sample_corpus"
    for p in write_corpus(target):
        print(p, p.stat().st_size)
