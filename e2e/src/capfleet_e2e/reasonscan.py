"""Every condition and Event reason the operators' code sets, found by reading the code (AST, no import).

The troubleshooting page (`capfleet_e2e.book`) documents each reason; this scanner is what keeps it honest:
a reason added to the code and not to the catalogue (`capfleet_e2e.reasoncatalogue`), or one the code no
longer sets, fails `python -m capfleet_e2e.book check`. Reading the source rather than importing it keeps
the operators' runtime out of the book's tooling, and finds reasons on paths no test takes.

Where a reason is set (a *site*):

- a `reason=` keyword argument of any call (capfleet's errors, conditions, kopf-free helpers alike);
- the `reason` field of a dataclass or NamedTuple constructed positionally (`Update(type, status, reason)`,
  `placing.Decision(None, "NoHypervisorMatches", ...)`), and the `"reason"` key of a dict display (the
  Event body `capfleet.events.build` writes);
- a parameter of a function that passes it on to a site (`Update.true`'s `reason`, `Recorder.transition`,
  `summaries.child_ready`'s `done_reason`): found by following parameters until nothing new turns up;
- an error class's `default_reason`, and a module constant named `REASONS` (the reasons baremetal-provision
  accepts from the deploy ramdisk).

A site's value is resolved through literals, module constants (also imported ones), local assignments,
`x if c else y`, `a or b`, functions returning literals, and `Literal[...]` annotations of parameters; a
string built from pieces (`"WaitingFor" + step`, f-strings) becomes a pattern with `*` for what varies. What
cannot be resolved (a reason relayed from an error, `exc.reason`; a child's reason copied onto its parent)
is reported as an *unresolved* site, named by module, function and expression: the catalogue must say for
each what it relays, so a new relay is a deliberate decision too.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

REASON = "reason"
WILDCARD = "*"
MAX_DEPTH = 8
"""How deep a value is followed through constants, assignments and returns (a cycle stops there)."""
_WORD = re.compile(r"\b[A-Z][a-z0-9]+(?:[A-Z][A-Za-z0-9]*)+\b")
"""A CamelCase word of two parts or more, as reasons are."""


@dataclass(frozen=True)
class Source:
    """One Python module to scan: its dotted name, the section of the book it belongs to (the operator, or
    `shared`), its text and where it was read from (for messages)."""

    module: str
    group: str
    text: str
    path: str = ""


@dataclass(frozen=True)
class Site:
    """Where something is set: the group and module, the enclosing function's qualified name (empty at
    module level), the line and the expression as written."""

    group: str
    module: str
    function: str
    line: int
    expression: str

    @property
    def key(self) -> tuple[str, str, str]:
        """What names an unresolved site in the catalogue: stable across edits that move lines."""
        return (self.module, self.function, self.expression)

    @property
    def where(self) -> str:
        return f"{self.module}:{self.line} ({self.function or 'module level'})"


@dataclass(frozen=True)
class Scan:
    """What the code sets: (group, reason) → where, the sites whose value is not known, and every CamelCase
    word in the code's string literals (what a relayed reason may be checked against)."""

    reasons: Mapping[tuple[str, str], tuple[Site, ...]]
    unresolved: Mapping[tuple[str, str, str], tuple[Site, ...]]
    words: frozenset[str]

    def names(self, group: str | None = None) -> set[str]:
        return {reason for g, reason in self.reasons if group is None or g == group}


# The index of the scanned code: modules, their constants and imports, and every callable.


@dataclass
class ModuleIndex:
    source: Source
    tree: ast.Module
    constants: dict[str, ast.expr] = field(default_factory=dict)
    modules: dict[str, str] = field(default_factory=dict)
    """Local name → scanned module it stands for (`from capfleet import errors`)."""
    symbols: dict[str, tuple[str, str]] = field(default_factory=dict)
    """Local name → (module, name) imported from a scanned module."""
    definitions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef] = field(
        default_factory=dict
    )


Function = ast.FunctionDef | ast.AsyncFunctionDef
N = TypeVar("N", bound=ast.AST)


@dataclass(frozen=True)
class Callee:
    """A callable of the scanned code: its key (`module:Qual.name`), how it takes arguments (positional
    parameter names, `self`/`cls` left out, and keyword-only ones) and, for a function, its definition."""

    key: str
    positional: tuple[str, ...]
    keyword_only: tuple[str, ...]
    function: Function | None = None
    module: str = ""
    root_sink: bool = False
    """A dataclass or NamedTuple with a `reason` field: constructing one sets a reason."""


@dataclass
class Index:
    modules: dict[str, ModuleIndex]
    callees: dict[str, Callee]
    methods: dict[str, list[str]]
    """Method name → keys of every method of that name (calls on an object of unknown class)."""


def index(sources: Iterable[Source]) -> Index:
    modules = {s.module: _module_index(s) for s in sources}
    for found in modules.values():
        _resolve_imports(found, modules)
    callees: dict[str, Callee] = {}
    methods: dict[str, list[str]] = {}
    for found in modules.values():
        for callee, is_method in _callees_of(found):
            callees[callee.key] = callee
            if is_method:
                methods.setdefault(callee.key.rsplit(".", 1)[-1], []).append(callee.key)
    return Index(modules, callees, methods)


def _module_index(source: Source) -> ModuleIndex:
    tree = ast.parse(source.text, filename=source.path or source.module)
    found = ModuleIndex(source, tree)
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            found.constants[node.targets[0].id] = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            found.constants[node.target.id] = node.value
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            found.definitions[node.name] = node
    return found


def _resolve_imports(found: ModuleIndex, modules: Mapping[str, ModuleIndex]) -> None:
    """What the module's imports of scanned modules stand for (capfleet imports absolutely only)."""
    for node in ast.walk(found.tree):
        if isinstance(node, ast.ImportFrom) and not node.level:
            base = node.module or ""
            for alias in node.names:
                local = alias.asname or alias.name
                if f"{base}.{alias.name}" in modules:
                    found.modules[local] = f"{base}.{alias.name}"
                elif base in modules:
                    found.symbols[local] = (base, alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname and alias.name in modules:
                    found.modules[alias.asname] = alias.name


def _callees_of(found: ModuleIndex) -> Iterator[tuple[Callee, bool]]:
    module = found.source.module
    for name, node in found.definitions.items():
        if isinstance(node, ast.ClassDef):
            yield _class_callee(f"{module}:{name}", node, module), False
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                    yield _function_callee(f"{module}:{name}.{item.name}", item, module, method=True), True
        else:
            yield _function_callee(f"{module}:{name}", node, module, method=False), False


def _function_callee(key: str, node: Function, module: str, *, method: bool) -> Callee:
    positional = [a.arg for a in [*node.args.posonlyargs, *node.args.args]]
    is_static = any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in node.decorator_list)
    if method and positional and not is_static:
        positional = positional[1:]
    keyword_only = tuple(a.arg for a in node.args.kwonlyargs)
    return Callee(key, tuple(positional), keyword_only, node, module)


def _is_record_class(node: ast.ClassDef) -> bool:
    """A dataclass, or a NamedTuple: its constructor takes its annotated fields in order."""
    for decorator in node.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if (isinstance(target, ast.Name) and target.id == "dataclass") or (
            isinstance(target, ast.Attribute) and target.attr == "dataclass"
        ):
            return True
    return any(
        (isinstance(b, ast.Name) and b.id == "NamedTuple")
        or (isinstance(b, ast.Attribute) and b.attr == "NamedTuple")
        for b in node.bases
    )


def _class_callee(key: str, node: ast.ClassDef, module: str) -> Callee:
    init = next(
        (
            i
            for i in node.body
            if isinstance(i, ast.FunctionDef | ast.AsyncFunctionDef) and i.name == "__init__"
        ),
        None,
    )
    if init is not None:
        method = _function_callee(key, init, module, method=True)
        return Callee(key, method.positional, method.keyword_only, init, module)
    if _is_record_class(node):
        fields = tuple(
            item.target.id
            for item in node.body
            if isinstance(item, ast.AnnAssign)
            and isinstance(item.target, ast.Name)
            and not (
                isinstance(item.annotation, ast.Name | ast.Subscript)
                and "ClassVar" in ast.unparse(item.annotation)
            )
        )
        return Callee(key, fields, (), None, module, root_sink=REASON in fields)
    return Callee(key, (), (), None, module)


# Scopes: where an expression is, for resolving its names.


@dataclass(frozen=True)
class Scope:
    module: ModuleIndex
    function: Function | None = None
    classes: tuple[str, ...] = ()
    qualname: str = ""

    @property
    def function_key(self) -> str:
        return f"{self.module.source.module}:{self.qualname}"

    def site(self, node: ast.AST, expression: str) -> Site:
        source = self.module.source
        return Site(source.group, source.module, self.qualname, getattr(node, "lineno", 0), expression)


@dataclass
class Resolution:
    """What an expression may be: known strings (with `*` where a part varies), the parts that are not known
    (as sites), and the parameters of the enclosing function it comes from (function key, parameter)."""

    values: set[str] = field(default_factory=set)
    unresolved: list[Site] = field(default_factory=list)
    forwarded: set[tuple[str, str]] = field(default_factory=set)

    def merge(self, other: Resolution) -> Resolution:
        self.values |= other.values
        self.unresolved += other.unresolved
        self.forwarded |= other.forwarded
        return self


def literal_strings(node: ast.expr) -> set[str] | None:
    """The strings of `Literal["a", "b"]` (also through `typing.Literal`), None for anything else."""
    if not isinstance(node, ast.Subscript):
        return None
    name = node.value.attr if isinstance(node.value, ast.Attribute) else getattr(node.value, "id", "")
    if name != "Literal":
        return None
    items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
    found = {i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)}
    return found if len(found) == len(items) else None


class Resolver:
    """What a reason expression may be, read through the index of the scanned code."""

    def __init__(self, idx: Index) -> None:
        self.idx = idx

    def resolve(self, node: ast.expr, scope: Scope, depth: int = 0) -> Resolution:
        if depth > MAX_DEPTH:
            return Resolution(unresolved=[scope.site(node, ast.unparse(node))])
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return Resolution({node.value})
        if isinstance(node, ast.JoinedStr | ast.BinOp):
            return self._pattern(node, scope, depth)
        if isinstance(node, ast.IfExp):
            return self.resolve(node.body, scope, depth + 1).merge(
                self.resolve(node.orelse, scope, depth + 1)
            )
        if isinstance(node, ast.BoolOp):
            result = Resolution()
            for value in node.values:
                result.merge(self.resolve(value, scope, depth + 1))
            return result
        if isinstance(node, ast.Name):
            return self._name(node, scope, depth)
        if isinstance(node, ast.Attribute):
            return self._attribute(node, scope, depth)
        if isinstance(node, ast.Call):
            return self._returned(node, scope, depth)
        return Resolution(unresolved=[scope.site(node, ast.unparse(node))])

    def _pattern(self, node: ast.JoinedStr | ast.BinOp, scope: Scope, depth: int) -> Resolution:
        """A string built from parts: each part's known values, `*` for a part that varies."""
        parts: list[ast.expr] = list(node.values) if isinstance(node, ast.JoinedStr) else []
        if isinstance(node, ast.BinOp):
            if not isinstance(node.op, ast.Add):
                return Resolution(unresolved=[scope.site(node, ast.unparse(node))])
            parts = [node.left, node.right]
        texts = {""}
        for part in parts:
            if isinstance(part, ast.FormattedValue):
                options = {WILDCARD}
            else:
                found = self.resolve(part, scope, depth + 1)
                options = found.values if found.values and not found.unresolved else {WILDCARD}
            texts = {a + b for a in texts for b in options}
        texts = {re.sub(r"\*+", WILDCARD, t) for t in texts}
        if texts <= {WILDCARD, ""}:
            return Resolution(unresolved=[scope.site(node, ast.unparse(node))])
        return Resolution(texts)

    def _name(self, node: ast.Name, scope: Scope, depth: int) -> Resolution:
        name = node.id
        if scope.function is not None:
            local = self._local(name, scope, depth)
            if local is not None:
                return local
        module = scope.module
        if name in module.constants:
            return self.resolve(module.constants[name], Scope(module), depth + 1)
        if name in module.symbols:
            return self._constant_of(*module.symbols[name], node, scope, depth)
        return Resolution(unresolved=[scope.site(node, name)])

    def _local(self, name: str, scope: Scope, depth: int) -> Resolution | None:
        """A parameter (its Literal annotation, or forwarded) or a local assignment; None if neither."""
        function = scope.function
        assert function is not None
        arguments = [*function.args.posonlyargs, *function.args.args, *function.args.kwonlyargs]
        for argument in arguments:
            if argument.arg == name:
                return self._parameter(argument, scope, depth)
        values = list(_assigned(function, name))
        if not values:
            return None
        result = Resolution()
        for value in values:
            result.merge(self.resolve(value, scope, depth + 1))
        return result

    def _parameter(self, argument: ast.arg, scope: Scope, depth: int) -> Resolution:
        if argument.annotation is not None:
            choices = self._literal(argument.annotation, scope, depth)
            if choices is not None:
                return Resolution(choices)
        return Resolution(forwarded={(scope.function_key, argument.arg)})

    def _literal(self, annotation: ast.expr, scope: Scope, depth: int) -> set[str] | None:
        """The strings of a `Literal[...]` annotation, directly or through a type alias."""
        direct = literal_strings(annotation)
        if direct is not None or depth > MAX_DEPTH:
            return direct
        module = scope.module
        if isinstance(annotation, ast.Name):
            if annotation.id in module.constants:
                return self._literal(module.constants[annotation.id], Scope(module), depth + 1)
            if annotation.id in module.symbols:
                other, name = module.symbols[annotation.id]
                target = self.idx.modules[other]
                if name in target.constants:
                    return self._literal(target.constants[name], Scope(target), depth + 1)
        if isinstance(annotation, ast.Attribute) and isinstance(annotation.value, ast.Name):
            other_name = module.modules.get(annotation.value.id)
            if other_name is not None and annotation.attr in self.idx.modules[other_name].constants:
                target = self.idx.modules[other_name]
                return self._literal(target.constants[annotation.attr], Scope(target), depth + 1)
        return None

    def _constant_of(
        self, module_name: str, name: str, node: ast.expr, scope: Scope, depth: int
    ) -> Resolution:
        target = self.idx.modules.get(module_name)
        if target is not None and name in target.constants:
            return self.resolve(target.constants[name], Scope(target), depth + 1)
        return Resolution(unresolved=[scope.site(node, ast.unparse(node))])

    def _attribute(self, node: ast.Attribute, scope: Scope, depth: int) -> Resolution:
        if isinstance(node.value, ast.Name) and node.value.id in scope.module.modules:
            return self._constant_of(scope.module.modules[node.value.id], node.attr, node, scope, depth)
        return Resolution(unresolved=[scope.site(node, ast.unparse(node))])

    def _returned(self, node: ast.Call, scope: Scope, depth: int) -> Resolution:
        """A call of a function of the scanned code: what its `return`s may give."""
        callee = self.callee(node, scope)
        if callee is None or callee.function is None:
            return Resolution(unresolved=[scope.site(node, ast.unparse(node))])
        target = self.idx.modules[callee.module]
        inner = Scope(target, callee.function, qualname=callee.key.split(":", 1)[1])
        result = Resolution()
        returns = [r.value for r in _own_nodes(callee.function, ast.Return) if r.value is not None]
        for value in returns:
            found = self.resolve(value, inner, depth + 1)
            # A returned parameter is only known at the call: it is not followed further.
            result.values |= found.values
            result.unresolved += found.unresolved
            if found.forwarded:
                result.unresolved.append(scope.site(node, ast.unparse(node)))
        if not returns:
            result.unresolved.append(scope.site(node, ast.unparse(node)))
        return result

    def callee(self, node: ast.Call, scope: Scope) -> Callee | None:
        """The callable a call names, when it is in the scanned code; calls on objects of unknown class are
        taken as the one method of that name, when only one method has it."""
        func, module = node.func, scope.module
        key: str | None = None
        if isinstance(func, ast.Name):
            key = self._named(func.id, scope)
        elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            owner = func.value.id
            if owner in module.modules:
                key = f"{module.modules[owner]}:{func.attr}"
            else:
                cls = self._named(owner, scope)
                key = f"{cls}.{func.attr}" if cls is not None else None
        if key is None and isinstance(func, ast.Attribute):
            candidates = self.idx.methods.get(func.attr, [])
            key = candidates[0] if len(candidates) == 1 else None
        return self.idx.callees.get(key) if key is not None else None

    def _named(self, name: str, scope: Scope) -> str | None:
        module = scope.module
        if name == "cls" and scope.classes:
            return f"{module.source.module}:{scope.classes[-1]}"
        if name in module.definitions:
            return f"{module.source.module}:{name}"
        if name in module.symbols:
            return "{}:{}".format(*module.symbols[name])
        return None


def _own_nodes(function: Function, kind: type[N]) -> Iterator[N]:
    """Nodes of `kind` in a function's body, not in functions or classes nested in it."""
    stack: list[ast.AST] = list(function.body)
    while stack:
        node = stack.pop()
        if isinstance(node, kind):
            yield node
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
            stack.extend(ast.iter_child_nodes(node))


def _assigned(function: Function, name: str) -> Iterator[ast.expr]:
    """The values assigned to local `name` in a function (plain and annotated assignments)."""
    for node in _own_nodes(function, ast.Assign):
        if any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            yield node.value
    for annotated in _own_nodes(function, ast.AnnAssign):
        if (
            isinstance(annotated.target, ast.Name)
            and annotated.target.id == name
            and annotated.value is not None
        ):
            yield annotated.value


# The walk: every site of every module, given which parameters are known to carry a reason.


@dataclass
class Findings:
    reasons: dict[tuple[str, str], list[Site]] = field(default_factory=dict)
    unresolved: dict[tuple[str, str, str], list[Site]] = field(default_factory=dict)
    forwarded: set[tuple[str, str]] = field(default_factory=set)

    def add(self, found: Resolution, site: Site) -> None:
        for value in found.values:
            self.reasons.setdefault((site.group, value), []).append(site)
        for unknown in found.unresolved:
            self.unresolved.setdefault(unknown.key, []).append(unknown)
        self.forwarded |= found.forwarded


class Walker(ast.NodeVisitor):
    """One module's sites, given the parameters known to carry a reason (`sinks`: callee key → names)."""

    def __init__(self, resolver: Resolver, module: ModuleIndex, sinks: Mapping[str, set[str]]) -> None:
        self.resolver = resolver
        self.sinks = sinks
        self.scope = Scope(module)
        self.findings = Findings()

    def _enter(self, scope: Scope, node: ast.AST) -> None:
        outer, self.scope = self.scope, scope
        self.generic_visit(node)
        self.scope = outer

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        scope = self.scope
        qualname = f"{scope.qualname}.{node.name}" if scope.qualname else node.name
        inner = Scope(scope.module, scope.function, (*scope.classes, node.name), qualname)
        for item in node.body:
            target = item.targets[0] if isinstance(item, ast.Assign) and len(item.targets) == 1 else None
            target = item.target if isinstance(item, ast.AnnAssign) else target
            value = item.value if isinstance(item, ast.Assign | ast.AnnAssign) else None
            if isinstance(target, ast.Name) and target.id == "default_reason" and value is not None:
                self._record(value, inner)
        self._enter(inner, node)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self._function(node)

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        self._function(node)

    def _function(self, node: Function) -> None:
        scope = self.scope
        qualname = f"{scope.qualname}.{node.name}" if scope.qualname else node.name
        self._enter(Scope(scope.module, node, scope.classes, qualname), node)

    def visit_Assign(self, node: ast.Assign) -> None:
        """`REASONS = frozenset({...})` at module level: reasons accepted from outside."""
        if self.scope.function is None and not self.scope.classes:
            for target in node.targets:
                if isinstance(target, ast.Name) and target.id.endswith("REASONS"):
                    for item in ast.walk(node.value):
                        if isinstance(item, ast.Constant) and isinstance(item.value, str):
                            self._record(item, self.scope)
        self.generic_visit(node)

    def visit_Dict(self, node: ast.Dict) -> None:
        for key, value in zip(node.keys, node.values, strict=True):
            if isinstance(key, ast.Constant) and key.value == REASON:
                self._record(value, self.scope)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        for argument in self._reason_arguments(node):
            self._record(argument, self.scope)
        self.generic_visit(node)

    def _reason_arguments(self, node: ast.Call) -> Iterator[ast.expr]:
        callee = self.resolver.callee(node, self.scope)
        carried: set[str] = set()
        if callee is not None:
            # A class's constructor carries what its __init__'s parameters do.
            carried = self.sinks.get(callee.key, set()) | self.sinks.get(f"{callee.key}.__init__", set())
            carried |= {REASON} if callee.root_sink else set()
        keywords = {k.arg: k.value for k in node.keywords if k.arg is not None}
        if REASON in keywords:
            yield keywords[REASON]
        starred = any(isinstance(a, ast.Starred) for a in node.args)
        for name in sorted(carried):
            if name in keywords:
                if name != REASON:
                    yield keywords[name]
                continue
            assert callee is not None
            position = callee.positional.index(name) if name in callee.positional else len(node.args)
            if position < len(node.args) and not starred:
                yield node.args[position]

    def _record(self, value: ast.expr, scope: Scope) -> None:
        found = self.resolver.resolve(value, scope)
        self.findings.add(found, scope.site(value, ast.unparse(value)))


def _walk(idx: Index, sinks: Mapping[str, set[str]]) -> Findings:
    resolver = Resolver(idx)
    total = Findings()
    for module in idx.modules.values():
        walker = Walker(resolver, module, sinks)
        walker.visit(module.tree)
        for reason, sites in walker.findings.reasons.items():
            total.reasons.setdefault(reason, []).extend(sites)
        for where, unknown in walker.findings.unresolved.items():
            total.unresolved.setdefault(where, []).extend(unknown)
        total.forwarded |= walker.findings.forwarded
    return total


def words_of(idx: Index) -> frozenset[str]:
    """Every CamelCase word in the string literals of the scanned code."""
    found: set[str] = set()
    for module in idx.modules.values():
        for node in ast.walk(module.tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                found |= set(_WORD.findall(node.value))
    return frozenset(found)


def scan(sources: Sequence[Source]) -> Scan:
    """Every reason the code sets, following parameters that carry one until no new one turns up."""
    idx = index(sources)
    sinks: dict[str, set[str]] = {}
    while True:
        findings = _walk(idx, sinks)
        grown = False
        for function, parameter in findings.forwarded:
            if parameter not in sinks.setdefault(function, set()):
                sinks[function].add(parameter)
                grown = True
        if not grown:
            break
    return Scan(
        reasons={
            key: tuple(sorted(set(sites), key=_order)) for key, sites in sorted(findings.reasons.items())
        },
        unresolved={key: tuple(sorted(set(s), key=_order)) for key, s in sorted(findings.unresolved.items())},
        words=words_of(idx),
    )


def _order(site: Site) -> tuple[str, int]:
    return (site.module, site.line)


# Reading the repository.


def group_of(path: Path, root: Path) -> tuple[str, Path] | None:
    """The group and the source folder of a file: `operators/<name>/src/...` is the operator's, anything
    under `shared/src` is `shared`; None for other files."""
    parts = path.relative_to(root).parts
    if len(parts) > 3 and parts[0] == "operators" and parts[2] == "src":
        return parts[1], root.joinpath(*parts[:3])
    if len(parts) > 2 and parts[:2] == ("shared", "src"):
        return "shared", root / "shared" / "src"
    return None


def sources_in(root: Path) -> list[Source]:
    """The operators' and the shared package's modules (the console sets no condition)."""
    found = []
    files = [
        *sorted((root / "operators").glob("*/src/**/*.py")),
        *sorted((root / "shared" / "src").glob("**/*.py")),
    ]
    for path in files:
        placed = group_of(path, root)
        if placed is None:
            continue
        group, base = placed
        dotted = ".".join(path.relative_to(base).with_suffix("").parts)
        module = dotted.removesuffix(".__init__")
        found.append(Source(module, group, path.read_text(), str(path.relative_to(root))))
    return found


RAMDISK_SCRIPT = Path("images") / "src" / "capfleet_images" / "deployramdisk" / "deploy_init.sh"
_RAMDISK_FAIL = re.compile(r"(?P<silent>callback=;\s*)?\bfail (?P<reason>[A-Z][A-Za-z]+)\b")


def ramdisk_reasons(script: str) -> dict[str, bool]:
    """The reasons the deploy ramdisk's `fail` reports, each with whether it reaches the operator (a `fail`
    right after `callback=` is only logged on the console: the ramdisk could not call back)."""
    found: dict[str, bool] = {}
    for match in _RAMDISK_FAIL.finditer(script):
        reason = match.group("reason")
        found[reason] = found.get(reason, False) or not match.group("silent")
    return found
