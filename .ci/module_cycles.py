"""Fails on a cycle of `use` edges between the library's modules.

Reads the graph `cargo modules dependencies` prints (Graphviz dot) on
standard input. cargo-modules' own `--acyclic` also counts a type and its
methods as a cycle, so the modules' strongly connected components are
found here instead. One cycle is by design: `Gateway`'s methods live in
their area's files (`gateway/mod.rs` says where), so the service type and
those areas refer to each other; any other cycle fails.
"""
import re
import sys

ALLOWED = re.compile(
    r"conversion_gateway::(gateway|oauth::\w+|intake::(endpoint|api_key))$"
)

edges = {}
for line in sys.stdin:
    m = re.match(r'\s*"([^"]+)" -> "([^"]+)" \[label="uses"', line)
    if m and m.group(1) != m.group(2):
        edges.setdefault(m.group(1), set()).add(m.group(2))

sys.setrecursionlimit(10000)
index, low, stack, on_stack, cycles = {}, {}, [], set(), []


def visit(node):
    index[node] = low[node] = len(index)
    stack.append(node)
    on_stack.add(node)
    for next_node in edges.get(node, ()):
        if next_node not in index:
            visit(next_node)
            low[node] = min(low[node], low[next_node])
        elif next_node in on_stack:
            low[node] = min(low[node], index[next_node])
    if low[node] == index[node]:
        component = []
        while True:
            member = stack.pop()
            on_stack.discard(member)
            component.append(member)
            if member == node:
                break
        if len(component) > 1:
            cycles.append(sorted(component))


nodes = set(edges) | {b for targets in edges.values() for b in targets}
for node in sorted(nodes):
    if node not in index:
        visit(node)

bad = [c for c in cycles if not all(ALLOWED.match(m) for m in c)]
for cycle in bad:
    print("modules that import each other:", " ".join(cycle))
if not edges:
    print("no dependency graph read")
    sys.exit(1)
print(f"{len(nodes)} modules, {len(bad)} cycles")
sys.exit(1 if bad else 0)
