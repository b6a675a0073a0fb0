"""A static check: every test that shells out to a binary of :data:`host.tools.TOOLS` is
guarded, so that on a machine without it the test skips naming its Debian package.

A *use* is a list literal whose first element is the binary's name (``["nft", "-f", "-"]``;
a tuple only as a runner's command: tuples of names are data) or a string command starting
with it passed to a runner (``node.cmd("ping -c1 ...")``). A use inside a test function (or a
method of a test class) is *guarded* when a marker or ``skipif`` on the function, its class
or the module's ``pytestmark`` covers the binary, or when the function body itself checks for
it (``shutil.which("X")`` / ``tools.missing("X")``, i.e. skips when it is missing) or hides it
(``path_without(dir, "X")``: the test is about X missing). A use anywhere else in a test
module (helpers, fixtures, classes) runs for whichever test calls it: the module's
``pytestmark`` must cover it.

What covers a binary: ``pytest.mark.tools("X", ...)``; the markers of tests/conftest.py that
check their tools (``mininet``: :data:`host.tools.MININET_TEST_TOOLS`, ``bmv2``, ``p4c``,
``tshark``); tests/support/rootless.py's ``needs_namespaces`` (unshare and the rack's
tools, which :func:`control_plane.testbed.isolate.check_available` checks) and
``needs_nsenter`` (nsenter too), or a module-level alias of them; any ``which("X")`` /
``missing("X")`` call inside a ``skipif``.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

from control_plane.testbed.isolate import RACK_TOOLS
from host.tools import MININET_TEST_TOOLS, TOOLS

#: Calls whose first argument is a command (a list, or a string run by a shell).
RUNNERS = frozenset({"run", "Popen", "call", "check_call", "check_output", "cmd", "popen",
                     "sendCmd", "quietRun", "pexec", "_sh", "_run", "run_node", "sh"})
#: Markers (tests/conftest.py) and skip decorators (tests/support) that check their binaries.
COVERS: dict[str, frozenset[str]] = {
    "mininet": frozenset(MININET_TEST_TOOLS),
    "bmv2": frozenset({"simple_switch_grpc"}),
    "p4c": frozenset({"p4c"}),
    "tshark": frozenset({"tshark"}),
    "needs_namespaces": frozenset({"unshare", *RACK_TOOLS}),
    "needs_nsenter": frozenset({"nsenter", "unshare", *RACK_TOOLS}),
}
#: Calls that find out whether a binary is there (inside a skip condition or a test's body).
CHECKS = frozenset({"which", "missing", "tools"})


@dataclasses.dataclass(frozen=True)
class Unguarded:
    """A use of ``binary`` at ``path:line`` that no guard covers."""

    path: str
    line: int
    binary: str
    where: str

    def __str__(self) -> str:
        return (f"{self.path}:{self.line}: {self.where} runs {self.binary} without a guard "
                f"(add @pytest.mark.tools({self.binary!r}) or a marker that checks it)")


def _name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _binary_of_literal(node: ast.AST, kinds: tuple = (ast.List,)) -> str | None:
    if isinstance(node, kinds) and node.elts:
        first = node.elts[0]
        if isinstance(first, ast.Constant) and isinstance(first.value, str) and first.value in TOOLS:
            return first.value
    return None


def _walk(node: ast.AST):
    """``ast.walk`` without decorators (``parametrize`` lists are no commands) and the literals
    of comparisons (``assert cmd[:2] == ["tshark", "-X"]`` checks a command, it runs nothing)."""
    todo = [node]
    while todo:
        n = todo.pop()
        yield n
        skip = {id(d) for d in getattr(n, "decorator_list", [])}
        if isinstance(n, ast.Compare):   # the compared literals; a call in there still runs
            skip |= {id(c) for c in (n.left, *n.comparators) if isinstance(c, (ast.List, ast.Tuple))}
        todo.extend(c for c in ast.iter_child_nodes(n) if id(c) not in skip)


def uses(node: ast.AST) -> list[tuple[int, str]]:
    """``(line, binary)`` of every use of a table binary under ``node``."""
    out = []
    for n in _walk(node):
        b = _binary_of_literal(n)
        if b:
            out.append((n.lineno, b))
        elif isinstance(n, ast.Call) and _name(n.func) in RUNNERS and n.args:
            arg = n.args[0]
            if isinstance(arg, ast.Tuple) and _binary_of_literal(arg, (ast.Tuple,)):
                out.append((n.lineno, _binary_of_literal(arg, (ast.Tuple,))))
            elif isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.split():
                word = arg.value.split()[0]
                if word in TOOLS:
                    out.append((n.lineno, word))
    return out


def _covered(expr: ast.AST, covers: dict[str, frozenset[str]]) -> set[str]:
    """The binaries a guard expression (marker, ``skipif``, ``pytestmark`` value) covers."""
    out: set[str] = set()
    for n in ast.walk(expr):
        name = _name(n)
        if name in covers:
            out |= covers[name]
        if isinstance(n, ast.Call) and _name(n.func) in CHECKS:
            out |= {a.value for a in n.args if isinstance(a, ast.Constant) and isinstance(a.value, str)}
    return out


def _checked_in_body(fn: ast.AST) -> set[str]:
    out: set[str] = set()
    for n in ast.walk(fn):
        if isinstance(n, ast.Call) and _name(n.func) in ("which", "missing", "path_without"):
            out |= {a.value for a in n.args if isinstance(a, ast.Constant) and isinstance(a.value, str)}
    return out


def check_source(text: str, path: str = "<test>") -> list[Unguarded]:
    """The unguarded uses of table binaries in the test module ``text``."""
    tree = ast.parse(text)
    aliases = {st.targets[0].id: st.value.id for st in tree.body   # needs_ns = needs_namespaces
               if isinstance(st, ast.Assign) and len(st.targets) == 1
               and isinstance(st.targets[0], ast.Name) and isinstance(st.value, ast.Name)
               and st.value.id in COVERS}
    covers = {**COVERS, **{a: COVERS[b] for a, b in aliases.items()}}

    def covered(expr: ast.AST) -> set[str]:
        return _covered(expr, covers)

    module: set[str] = set()
    for st in tree.body:
        if isinstance(st, ast.Assign) and any(_name(t) == "pytestmark" for t in st.targets):
            module |= covered(st.value)
    bad: list[Unguarded] = []
    seen: set[int] = set()

    def visit_test(fn: ast.FunctionDef | ast.AsyncFunctionDef, outer: set[str], where: str) -> None:
        guard = outer | _checked_in_body(fn)
        for d in fn.decorator_list:
            guard |= covered(d)
        for line, b in uses(fn):
            seen.add(line)
            if b not in guard:
                bad.append(Unguarded(path, line, b, where))

    for st in tree.body:
        if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef)) and st.name.startswith("test"):
            visit_test(st, module, f"test {st.name}")
        elif isinstance(st, ast.ClassDef) and st.name.startswith("Test"):
            cls = set(module)
            for d in st.decorator_list:
                cls |= covered(d)
            for m in st.body:
                if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef)) and m.name.startswith("test"):
                    visit_test(m, cls, f"test {st.name}.{m.name}")
    for line, b in uses(tree):   # everything else: helpers, fixtures, classes
        if line not in seen and b not in module:
            bad.append(Unguarded(path, line, b, "a helper of the module (its pytestmark)"))
    return bad


def check_tree(root: Path) -> list[Unguarded]:
    """:func:`check_source` over every ``test_*.py`` under ``root``."""
    bad = []
    for p in sorted(root.rglob("test_*.py")):
        bad += check_source(p.read_text(), str(p.relative_to(root.parent)))
    return bad
