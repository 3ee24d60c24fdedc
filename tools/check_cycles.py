"""`make lint`: fail on any import cycle between llmtk's modules.

Function-level imports count (grimp reads every import statement): a cycle hidden inside
a function is still a cycle, and the fix is to move the shared piece down a layer.
Imports under `if TYPE_CHECKING:` never run, so they do not count.
"""

import sys

import grimp


def cycles(package: str = "llmtk") -> list[list[str]]:
    """The strongly connected groups of more than one module, each sorted (Tarjan)."""
    graph = grimp.build_graph(package, exclude_type_checking_imports=True)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(root: str) -> None:
        # iterative, so a deep import chain cannot hit the recursion limit
        work = [(root, iter(edges[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(edges[child])))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    group.append(m)
                    if m == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))

    for module in sorted(edges):
        if module not in index:
            visit(module)
    return sorted(found)


def main() -> int:
    found = cycles()
    for group in found:
        print("import cycle: " + " <-> ".join(group), file=sys.stderr)
    if found:
        print("move what the modules share into a module below them both", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
