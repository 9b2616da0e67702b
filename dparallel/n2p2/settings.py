"""The keyword layer of an n2p2 ``input.nn``, read exactly as n2p2's ``Settings`` reads it
(``libnnp/Settings.cpp``: comments cut at ``#`` then ``!``, case-sensitive keywords, unknown
ones warned about, a repeated once-only keyword or two spellings of one keyword a
"critical problem" that stops; docs/n2p2.md). Errors name the file and the lines.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from pathlib import Path

from dparallel.errors import InputFormatError
from dparallel.n2p2._text import text_lines

__all__ = [
    "ALIASES",
    "KNOWN_KEYWORDS",
    "USED_KEYWORDS",
    "Entry",
    "Settings",
    "log_unused",
    "read_settings",
]

log = logging.getLogger(__name__)

#: Every keyword n2p2 (commit 61daa0df) knows, main spellings.
KNOWN_KEYWORDS: frozenset[str] = frozenset(
    """
    number_of_elements elements atom_energy cutoff_type symfunction_short
    scale_symmetry_functions scale_min_short scale_max_short center_symmetry_functions
    scale_symmetry_functions_sigma global_hidden_layers_short
    global_hidden_layers_electrostatic global_nodes_short global_nodes_electrostatic
    global_activation_short global_activation_electrostatic element_hidden_layers_short
    element_hidden_layers_electrostatic element_nodes_short element_nodes_electrostatic
    element_activation_short element_activation_electrostatic normalize_nodes mean_energy
    conv_length conv_energy conv_charge nnp_type fixed_gausswidth
    ewald_truncation_error_method ewald_prec screen_electrostatics four_pi_epsilon
    random_seed test_fraction epochs normalize_data_set use_short_forces rmse_threshold
    rmse_threshold_energy rmse_threshold_force rmse_threshold_charge rmse_threshold_trials
    rmse_threshold_trials_energy rmse_threshold_trials_force rmse_threshold_trials_charge
    energy_fraction force_fraction force_energy_ratio charge_fraction use_old_weights_short
    use_old_weights_charge weights_min weights_max initial_hardness
    nguyen_widrow_weights_short nguyen_widrow_weights_charge precondition_weights
    main_error_metric write_trainpoints write_trainforces write_traincharges
    write_weights_epoch write_neuronstats write_trainlog repeated_energy_update updater_type
    parallel_mode jacobian_mode update_strategy selection_mode selection_mode_energy
    selection_mode_force selection_mode_charge task_batch_size_energy task_batch_size_force
    task_batch_size_charge gradient_type gradient_eta gradient_adam_eta gradient_adam_beta1
    gradient_adam_beta2 gradient_adam_epsilon kalman_type kalman_epsilon kalman_eta
    kalman_etatau kalman_etamax kalman_q0 kalman_qtau kalman_qmin kalman_lambda_short
    kalman_nue_short memorize_symfunc_results force_weight
    """.split()  # noqa: SIM905 - a word list reads best as words
)

#: Alternative spellings → main keyword (n2p2's ``a[...]`` table).
ALIASES: dict[str, str] = {
    "nnp_generation": "nnp_type",
    "nnp_type_gen": "nnp_type",
    "nnp_gen": "nnp_type",
    "short_energy_error_threshold": "rmse_threshold_energy",
    "short_force_error_threshold": "rmse_threshold_force",
    "short_energy_fraction": "energy_fraction",
    "short_force_fraction": "force_fraction",
    "symfunction": "symfunction_short",
}

#: Keywords some part of dparallel uses (descriptors, model import, training options).
USED_KEYWORDS: frozenset[str] = frozenset(
    """
    number_of_elements elements atom_energy cutoff_type symfunction_short
    scale_symmetry_functions scale_min_short scale_max_short center_symmetry_functions
    scale_symmetry_functions_sigma global_hidden_layers_short global_nodes_short
    global_activation_short element_hidden_layers_short element_nodes_short
    element_activation_short normalize_nodes mean_energy conv_energy conv_length nnp_type
    random_seed test_fraction epochs use_short_forces updater_type gradient_type
    gradient_adam_eta kalman_type kalman_epsilon kalman_q0 kalman_qtau kalman_qmin kalman_eta
    kalman_etatau kalman_etamax force_energy_ratio use_old_weights_short
    """.split()  # noqa: SIM905 - a word list reads best as words
)

# keywords that may appear more than once (n2p2's sanityCheck exceptions)
_REPEATABLE = frozenset(
    """symfunction symfunction_short atom_energy element_nodes_short fixed_gausswidth
    initial_hardness""".split()  # noqa: SIM905 - a word list reads best as words
)


@dataclass(frozen=True)
class Entry:
    """One keyword line: the spelling used, its value (blanks reduced) and its 1-based line."""

    keyword: str
    value: str
    line: int

    @property
    def words(self) -> list[str]:
        """The value split into words (at blanks and tabs)."""
        return split_words(self.value)


@dataclass
class Settings:
    """Keyword lines of one file, in file order, looked up by main keyword (aliases folded)."""

    path: Path
    entries: list[Entry]
    unknown: list[Entry] = field(default_factory=list)

    def values(self, keyword: str) -> list[Entry]:
        """Every line of ``keyword`` (any spelling), in file order."""
        return [e for e in self.entries if ALIASES.get(e.keyword, e.keyword) == keyword]

    def get(self, keyword: str) -> Entry | None:
        """The line of a once-only ``keyword``, or None when absent."""
        found = self.values(keyword)
        return found[0] if found else None

    def has(self, keyword: str) -> bool:
        """Whether ``keyword`` (any spelling) is present."""
        return self.get(keyword) is not None

    def require(self, keyword: str) -> Entry:
        """The line of ``keyword``; stops, as n2p2 does, when it is missing."""
        entry = self.get(keyword)
        if entry is None:
            raise InputFormatError(
                f"keyword {keyword!r} not found (n2p2 stops here too: 'ERROR: Keyword "
                f'"{keyword}" not found\')',
                path=self.path,
            )
        return entry

    def fail(self, entry: Entry, message: str) -> InputFormatError:
        """An error naming the file, the line and the line's text."""
        return InputFormatError(
            f"{message}; got '{entry.keyword} {entry.value}'".rstrip(),
            path=self.path,
            line=entry.line,
        )


#: (file, its unused keywords) already warned of in this process.
_WARNED: set[tuple[str, tuple[str, ...]]] = set()


def log_unused(settings: Settings) -> list[str]:
    """Warn once, listing every keyword of the file no part of dparallel uses; returns them.
    A file read again (``train --config input.nn`` with its ``init_from``) is not warned of
    again while those keywords are the same."""
    present = dict.fromkeys(ALIASES.get(e.keyword, e.keyword) for e in settings.entries)
    unused = [k for k in present if k not in USED_KEYWORDS]
    said = (str(settings.path), tuple(unused))
    if unused and said not in _WARNED:
        _WARNED.add(said)
        log.warning(
            "%s: keywords with no counterpart in dparallel, not used: %s",
            settings.path,
            " ".join(unused),
        )
    return unused


#: A word of an input.nn line: n2p2 (``reduce``, ``split``) separates words at ' ' and '\\t'
#: only; any other space (no-break, '\\r', …) is part of a word there.
_WORD = re.compile(r"[^ \t]+")


def split_words(text: str) -> list[str]:
    """``text`` split into words as n2p2 splits an input.nn line."""
    return _WORD.findall(text)


def _strip(line: str) -> str:
    """A line without its ``#`` then ``!`` comment (n2p2's order)."""
    return line.split("#", 1)[0].split("!", 1)[0]


def read_settings(path: str | Path) -> Settings:
    """Read ``path`` as n2p2 does; unknown keywords are logged, critical problems raised.

    Raises
    ------
    SourceNotFoundError
        The file does not exist.
    InputFormatError
        A once-only keyword is repeated or two spellings of one keyword are mixed
        (n2p2 stops on both); the message lists every such line.
    """
    p = Path(path)
    entries: list[Entry] = []
    unknown: list[Entry] = []
    for lineno, raw in enumerate(text_lines(p, "input.nn"), start=1):
        words = split_words(_strip(raw))
        if not words or (len(words) == 1 and words[0] == "\r"):  # n2p2 skips a blank line's '\r'
            continue
        if "\r" in _strip(raw):
            raise InputFormatError(
                "a carriage return (Windows line end), which n2p2 reads as part of the line's "
                "last word ('elements … Ag\\r' names an unknown element there, "
                "'use_short_forces\\r' is an unknown keyword): convert the file to Unix line "
                "ends (dos2unix)",
                path=p,
                line=lineno,
            )
        entry = Entry(words[0], " ".join(words[1:]), lineno)
        if entry.keyword in KNOWN_KEYWORDS or entry.keyword in ALIASES:
            entries.append(entry)
        else:
            unknown.append(entry)
    settings = Settings(p, entries, unknown)
    _check_critical(settings)
    if unknown:
        listed = ", ".join(f"{e.keyword!r} (line {e.line})" for e in unknown)
        log.warning("%s: unknown keywords, ignored as n2p2 ignores them: %s", p, listed)
    return settings


def _check_critical(settings: Settings) -> None:
    """Raise on what n2p2 counts as critical: repeats and mixed spellings."""
    problems: list[str] = []
    first: Entry | None = None
    by_spelling: dict[str, list[Entry]] = {}
    for e in settings.entries:
        by_spelling.setdefault(e.keyword, []).append(e)
    for spelling, found in by_spelling.items():
        if len(found) > 1 and spelling not in _REPEATABLE:
            lines = ", ".join(str(e.line) for e in found)
            problems.append(f"{spelling!r} appears {len(found)} times (lines {lines})")
            first = first or found[1]
    by_main: dict[str, set[str]] = {}
    for spelling in by_spelling:
        by_main.setdefault(ALIASES.get(spelling, spelling), set()).add(spelling)
    for main, spellings in by_main.items():
        if len(spellings) > 1:
            names = " and ".join(sorted(repr(s) for s in spellings))
            problems.append(f"{names} are two spellings of {main!r}; use one")
            first = first or by_spelling[sorted(spellings)[1]][0]
    if problems:
        raise InputFormatError(
            "n2p2 stops on this file ('critical problem'): " + "; ".join(problems),
            path=settings.path,
            line=None if first is None else first.line,
        )
