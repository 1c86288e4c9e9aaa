"""What a newcomer needs to read self-play's curves and task buffer: the two roles, the three task types and what each
reward value means. The values are the engine's own (tasks/base.py; objectives/selfplay.py scores the proposer's
refused tasks with the format penalty), so the words cannot drift from what the run pays."""

from __future__ import annotations

from desktop_app.engine.tasks.base import PENALTY_FORMAT, PENALTY_UNPARSEABLE, REWARD_CORRECT, REWARD_WRONG

ROLES = {
    "proposer": "writes new tasks (a program and its inputs) for the solver",
    "solver": "answers the tasks; every answer is checked by running the program",
}
TASK_TYPES = {
    "deduction": "given a program and an input, give its output",
    "abduction": "given a program and an output, give an input that produces it",
    "induction": "given input → output pairs, write the program",
}


def signed(value: float) -> str:
    """A reward as people write it: "+1", "0", "−0.5" (a true minus sign)."""
    text = f"{value:+g}" if value else "0"
    return text.replace("-", "−")


def solver_rewards() -> str:
    return (f"{signed(REWARD_CORRECT)} correct, {signed(REWARD_WRONG)} wrong, {signed(PENALTY_FORMAT)} an answer in "
            f"the wrong format, {signed(PENALTY_UNPARSEABLE)} no answer could be read")


def proposer_rewards() -> str:
    return (f"1 − the solver's solve rate on its task (0 when every sample or none solves it: too easy or too "
            f"hard), {signed(PENALTY_FORMAT)} an invalid or trivial task, 0 a duplicate")


def legend_html() -> str:
    """The roles, task types and rewards, as a short block of rich text (the task buffer's help, tooltips)."""
    roles = "; ".join(f"<b>{name}</b> {what}" for name, what in ROLES.items())
    types = "; ".join(f"<b>{name}</b>: {what}" for name, what in TASK_TYPES.items())
    return (f"<b>Roles</b> — {roles}.<br><b>Task types</b> — {types}.<br><b>Rewards</b> — solver: {solver_rewards()}; "
            f"proposer: {proposer_rewards()}.")


def curves_note() -> str:
    """One line over self-play's curves: how to tell the reward lines apart and what a negative reward is."""
    return (f"Reward lines: dashed = proposer, colour = task type · {signed(PENALTY_FORMAT)} wrong format or invalid "
            f"task, {signed(PENALTY_UNPARSEABLE)} no answer read (hover for every value)")


def reward_panel_tip() -> str:
    """The tooltip of the reward-per-role panel: how its lines are drawn, then the legend."""
    return ("One line per role and task type: the colour is the task type, the proposer's lines are dashed and "
            f"drawn over the solver's solid ones.<br>{legend_html()}")
