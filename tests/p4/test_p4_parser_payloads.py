"""The P4 parsers choose the payload that ``layout.payload_for`` names (no compiler needed).

The parsers of both programs are hand-written: their ``parse_thc`` select cases restate
``payload_for`` with literal widths. These tests read the select cases and the states they
lead to from the P4 source and check them against ``payload_for`` for every message type and
lane width, so that a width changed on either side fails here (and CI), not on a switch.
"""

from __future__ import annotations

import re

import pytest

from host.paths import REPO
from host.protocol import layout as lay

V1MODEL_PARSER = REPO / "p4" / "v1model" / "include" / "parser.p4"
TNA_PARSER = REPO / "p4" / "tna" / "include" / "parser.p4"
TNA_TARGET = REPO / "p4" / "tna" / "include" / "target.p4"
#: Payloads the TNA program parses (p4/README.md, "Tofino": values uplink and norms only; the
#: 4-bit indices and 16/32-bit result lanes are v1model-only).
TNA_PAYLOADS = (lay.LANES[lay.VALUE_BITS], lay.NORMS)


def _block(text: str, opener: str) -> str:
    """The text between the brace after ``opener`` and its matching closing brace."""
    start = text.index(opener)
    i = text.index("{", start) + 1
    depth = 1
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i:j]
    raise ValueError(f"unbalanced braces after {opener!r}")


def thc_cases(text: str) -> dict[tuple[int, int], str]:
    """(msg_type, lane_bits) -> next state of the ``parse_thc`` select of one parser."""
    state = _block(text, "state parse_thc")
    sel = _block(state, "transition select(hdr.thc.msg_type, hdr.thc.lane_bits)")
    cases: dict[tuple[int, int], str] = {}
    for msg, width, nxt in re.findall(r"\(\s*MSG_(\w+)\s*,\s*8w(\d+)\s*\)\s*:\s*(\w+)\s*;", sel):
        key = (int(lay.MsgType[msg]), int(width))
        assert key not in cases, f"select case {key} listed twice"
        cases[key] = nxt
    return cases


def extracted(text: str, state: str) -> list[str]:
    """Headers (``hdr.X``) a parser state extracts, in order."""
    return re.findall(r"pkt\.extract\(\s*hdr\.(\w+)\s*\)", _block(text, f"state {state} "))


def _defined() -> dict[tuple[int, int], lay.Payload]:
    """Every (msg_type, lane_bits) combination ``payload_for`` defines."""
    return {(int(t), w): p for t in lay.MsgType for w in range(256)
            if (p := lay.payload_for(t, w)) is not None}


def v1model_mismatches(text: str) -> list[str]:
    """How the v1model parser's payload choice differs from ``payload_for`` (empty: none)."""
    cases, want = thc_cases(text), _defined()
    out = [f"{k}: payload_for gives {p.name}, the parser has no case" for k, p in want.items()
           if k not in cases]
    out += [f"{k}: the parser goes to {s}, payload_for defines no payload" for k, s in cases.items()
            if k not in want]
    for k, s in cases.items():
        if k in want and extracted(text, s) != [want[k].name]:
            out.append(f"{k}: {s} extracts {extracted(text, s)}, payload_for gives {want[k].name}")
    return out


def tna_mismatches(text: str, segment_bytes: int) -> list[str]:
    """As :func:`v1model_mismatches` for the TNA parser, whose payload is one or two
    ``segment_bytes`` word segments and which parses only :data:`TNA_PAYLOADS`."""
    cases = thc_cases(text)
    want = {k: p for k, p in _defined().items() if p in TNA_PAYLOADS}
    out = [f"{k}: payload_for gives {p.name}, the parser has no case" for k, p in want.items()
           if k not in cases]
    out += [f"{k}: the parser goes to {s}, not a TNA payload of payload_for" for k, s in cases.items()
            if k not in want]
    for k, s in cases.items():
        if k in want:
            got = extracted(text, s)
            if not all(h.startswith("seg_") for h in got) or len(got) * segment_bytes != want[k].nbytes:
                out.append(f"{k}: {s} extracts {got} ({len(got)} x {segment_bytes} bytes), "
                           f"payload_for gives {want[k].name} ({want[k].nbytes} bytes)")
    return out


def _tna_segment_bytes() -> int:
    words = re.search(r"^#define\s+TNA_WORDS_PER_PASS\s+(\d+)", TNA_TARGET.read_text(), re.M)
    return int(words.group(1)) * 4


def test_v1model_parser_selects_the_payload_of_payload_for():
    assert v1model_mismatches(V1MODEL_PARSER.read_text()) == []


def test_tna_parser_selects_the_payload_of_payload_for():
    assert tna_mismatches(TNA_PARSER.read_text(), _tna_segment_bytes()) == []


@pytest.mark.parametrize(("old", "new"), [
    ("(MSG_RESULT, 8w16): parse_lanes16;", "(MSG_RESULT, 8w16): parse_lanes32;"),
    ("(MSG_RESULT, 8w16): parse_lanes16;", "(MSG_RESULT, 8w12): parse_lanes16;"),
    ("(MSG_DATA, 8w4): parse_indices;", ""),
    ("(MSG_NORM, 8w32): parse_norms;", "(MSG_NORM, 8w32): parse_norms;\n(MSG_DATA, 8w32): parse_lanes32;"),
])
def test_a_changed_v1model_width_is_caught(old, new):
    text = V1MODEL_PARSER.read_text()
    assert old in text
    assert v1model_mismatches(text.replace(old, new)) != []


@pytest.mark.parametrize(("old", "new"), [
    ("(MSG_RESULT, 8w8): parse_two_segments_wire;", "(MSG_RESULT, 8w16): parse_two_segments_wire;"),
    ("(MSG_NORM, 8w32): parse_one_segment;", "(MSG_NORM, 8w32): parse_two_segments_wire;"),
])
def test_a_changed_tna_width_is_caught(old, new):
    text = TNA_PARSER.read_text()
    assert old in text
    assert tna_mismatches(text.replace(old, new), _tna_segment_bytes()) != []
