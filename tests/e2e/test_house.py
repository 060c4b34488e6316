"""The house's structure holds as it grows (CONTRIBUTING.md, "How the code is laid out"): no
source file outside tests is over 1,000 lines, and no two files of a crate reach each other
through a chain of imports. A circle means two concepts were not really separated; the last
one found (a request's id in `app.rs`, read by the routes that `app.rs` routes to) was only
seen because this was checked by hand, so now it is checked here."""

import re

from conftest import ROOT

CRATES = ROOT / "crates"
MAX_LINES = 1000


def source_files(crate):
    """A crate's non-test source files, by module path (`a/b.rs` and `a/b/mod.rs` are a::b)."""
    files = {}
    for path in sorted((crate / "src").rglob("*.rs")):
        rel = path.relative_to(crate / "src")
        if path.stem.endswith("tests") or "tests" in rel.parts[:-1]:
            continue
        parts = list(rel.with_suffix("").parts)
        if parts[-1] in ("mod", "lib", "main"):
            parts.pop()
        files[tuple(parts)] = path
    return files


def code_of(path):
    """The file's code, without its test module, comments and string literals."""
    text = path.read_text()
    cut = re.search(r"#\[cfg\(test\)\]\s*(?:#\[path[^\]]*\]\s*)?mod tests", text)
    if cut:
        text = text[: cut.start()]
    text = re.sub(r'r#*"(?:.|\n)*?"#*|"(?:\\.|[^"\\])*"', '""', text)
    return re.sub(r"//[^\n]*", "", text)


def expand_use(tree):
    """`a::{b, c::{d, e as f}}` -> [a::b, a::c::d, a::c::e]."""
    tree = re.sub(r"\s+", "", re.sub(r"\s+as\s+\w+", "", tree))
    brace = tree.find("{")
    if brace < 0:
        return [tree]
    prefix, inner = tree[:brace], tree[brace + 1 : tree.rindex("}")]
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(inner):
        depth += ch == "{"
        depth -= ch == "}"
        if ch == "," and depth == 0:
            parts.append(inner[start:i])
            start = i + 1
    parts.append(inner[start:])
    out = []
    for part in filter(None, parts):
        for leaf in expand_use(part):
            out.append(prefix.rstrip(":") if leaf == "self" else prefix + leaf)
    return out


def paths_used(module, code, children):
    """Every path the file names, absolute within the crate (a tuple of segments)."""
    raw = []
    for tree in re.findall(r"\buse\s+([^;]+);", code):
        raw += expand_use(tree)
    raw += re.findall(r"\b(?:crate|super|self)(?:::\w+)+", code)
    here = list(module)
    out = []
    for path in raw:
        segs = path.split("::")
        if segs[0] == "crate":
            out.append(tuple(segs[1:]))
        elif segs[0] in ("super", "self"):
            base = list(here)
            while segs and segs[0] in ("super", "self"):
                if segs.pop(0) == "super":
                    base = base[:-1]
            out.append(tuple(base + segs))
        elif segs[0] in children:
            out.append(tuple(here + segs))
    return out


def reexports(files):
    """Names a module file re-exports with `pub use`, mapped to where they are defined."""
    names = {}
    for module, path in files.items():
        for tree in re.findall(r"\bpub\s+use\s+([^;]+);", code_of(path)):
            for leaf in expand_use(tree):
                segs = leaf.split("::")
                if segs[0] == "crate":
                    target = tuple(segs[1:-1])
                elif segs[0] == "self":
                    target = tuple(module) + tuple(segs[1:-1])
                else:
                    target = tuple(module) + tuple(segs[:-1])
                names[tuple(module) + (segs[-1],)] = target
    return names


def resolve(path, files, exported):
    """The file a path leads to: its longest prefix that is a module file, through re-exports."""
    for k in range(len(path), -1, -1):
        head = path[:k]
        if head in files:
            if k < len(path) and head + (path[k],) in exported:
                target = exported[head + (path[k],)]
                return resolve(target + path[k + 1 :], files, {}) if target != head else head
            return head
    return ()


def import_graph(crate):
    files = source_files(crate)
    exported = reexports(files)
    graph = {}
    for module, path in files.items():
        children = {m[len(module)] for m in files if len(m) == len(module) + 1 and m[: len(module)] == module}
        edges = set()
        for used in paths_used(module, code_of(path), children):
            target = resolve(used, files, exported)
            # a parent declares its children and re-exports them; that is not an import back
            if target != module and target != module[: len(target)]:
                edges.add(target)
        graph[module] = edges
    return graph


def circles(graph):
    """Strongly connected sets of more than one file (Tarjan)."""
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted("/".join(m) or "lib" for m in comp))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def crates():
    found = sorted(p for p in CRATES.iterdir() if (p / "Cargo.toml").exists())
    assert len(found) >= 5
    return found


def test_no_source_file_is_over_a_thousand_lines():
    long = []
    for crate in crates():
        for path in source_files(crate).values():
            lines = path.read_text().count("\n")
            if lines > MAX_LINES:
                long.append(f"{path.relative_to(ROOT)}: {lines}")
    assert not long, f"split these by concern: {long}"


def test_no_file_imports_in_a_circle():
    found = {crate.name: circles(import_graph(crate)) for crate in crates()}
    found = {name: c for name, c in found.items() if c}
    assert not found, f"files that import each other through a chain: {found}"


def test_the_circle_check_sees_a_circle():
    graph = {("a",): {("b",)}, ("b",): {("c",)}, ("c",): {("a",)}, ("d",): {("a",)}}
    assert circles(graph) == [["a", "b", "c"]]
    assert expand_use("crate::{error::ApiError, routes::{self, admit as a}}") == [
        "crate::error::ApiError",
        "crate::routes",
        "crate::routes::admit",
    ]


def test_the_import_graph_sees_each_kind_of_import():
    server = CRATES / "braid-server"
    graph = import_graph(server)
    # `use crate::{error::ApiError, validation}` in a route, a grouped import
    assert ("validation",) in graph[("routes", "chat")]
    assert ("error",) in graph[("routes", "chat")]
    # app.rs routes to the route files
    assert ("routes", "chat") in graph[("app",)] or ("routes",) in graph[("app",)]
