#!/usr/bin/env python3
"""Writes llama-server's flag lists from llama.cpp's common/arg.cpp.

    python3 src/engine/flags/llamacpp_from_arg_cpp.py VENDOR/llama.cpp/common/arg.cpp BUILD

BUILD names the source (e.g. "llama-cpp-python 0.3.36, llama.cpp 0c1e570"). Writes
src/engine/flags/llamacpp.txt (every spelling, for `validate`) and crates/sim/src/llamacpp_flags.txt
(one option per line with its kind, for the simulator). An option is llama-server's when its
`set_examples` holds LLAMA_EXAMPLE_SERVER or LLAMA_EXAMPLE_COMMON (the default), its
`set_excludes` does not hold LLAMA_EXAMPLE_SERVER and it is not `set_preset_only`, as
`common_params_parser_init`'s `add_opt` decides.
"""
import os
import re
import sys


def skip_literal(s, j):
    q = s[j]
    j += 1
    while s[j] != q:
        j += 2 if s[j] == "\\" else 1
    return j


def strip_comments(s):
    out, i = [], 0
    while i < len(s):
        if s.startswith('R"(', i):
            out.append('""')
            i = s.index(')"', i) + 2
        elif s[i] in "\"'":
            j = skip_literal(s, i)
            out.append(s[i : j + 1])
            i = j + 1
        elif s.startswith("//", i):
            i = s.index("\n", i)
        elif s.startswith("/*", i):
            i = s.index("*/", i) + 2
        else:
            out.append(s[i])
            i += 1
    return "".join(out)


def closing(s, i):
    """Index of the bracket closing the one at s[i]."""
    depth, j = 0, i
    while True:
        c = s[j]
        if c in "\"'":
            j = skip_literal(s, j)
        elif c in "({[":
            depth += 1
        elif c in ")}]":
            depth -= 1
            if depth == 0:
                return j
        j += 1


def top_level_items(body):
    items, depth, start, j = [], 0, 0, 0
    while j < len(body):
        c = body[j]
        if c in "\"'":
            j = skip_literal(body, j)
        elif c in "({[":
            depth += 1
        elif c in ")}]":
            depth -= 1
        elif c == "," and depth == 0:
            items.append(body[start:j])
            start = j + 1
        j += 1
    items.append(body[start:])
    return items


def options(src, example="LLAMA_EXAMPLE_SERVER"):
    s = strip_comments(src)
    for m in re.finditer(r"add_opt\(common_arg\(", s):
        ctor = m.end() - 1
        ctor_end = closing(s, ctor)
        tail = s[ctor_end + 1 : closing(s, m.start() + len("add_opt"))]
        items = top_level_items(s[ctor + 1 : ctor_end])
        names = re.findall(r'"([^"]*)"', items[0])
        neg = re.findall(r'"([^"]*)"', items[1]) if items[1].strip().startswith("{") else []
        ex = re.search(r"set_examples\(\{([^}]*)\}", tail)
        examples = [e.strip() for e in ex.group(1).split(",")] if ex else ["LLAMA_EXAMPLE_COMMON"]
        exc = re.search(r"set_excludes\(\{([^}]*)\}", tail)
        excludes = [e.strip() for e in exc.group(1).split(",")] if exc else []
        if not (example in examples or "LLAMA_EXAMPLE_COMMON" in examples):
            continue
        if example in excludes or "set_preset_only" in tail:
            continue
        # (args, help, void handler) takes no value; (args, args_neg, help, bool handler) is
        # a pair of switches; (args, value_hint, help, handler) one value; 5 items two.
        kind = "switch" if neg or len(items) == 3 else ("value" if len(items) == 4 else "value2")
        yield kind, names, neg


def main():
    arg_cpp, build = sys.argv[1], sys.argv[2]
    here = os.path.dirname(os.path.abspath(__file__))
    opts, seen = [], set()
    for kind, names, neg in options(open(arg_cpp).read()):
        key = tuple(names + neg)
        if key not in seen:  # an option added twice (platform branches) is one option
            seen.add(key)
            opts.append((kind, names, neg))
    spellings = [n for _, names, neg in opts for n in names + neg]
    with open(os.path.join(here, "llamacpp.txt"), "w") as f:
        f.write(
            f"# `llama-server` flags: every spelling common/arg.cpp gives it ({len(spellings)}), from {build}.\n"
            "# Written by llamacpp_from_arg_cpp.py; long flags without `--`, short ones with their `-`.\n"
        )
        for n in spellings:
            f.write((n[2:] if n.startswith("--") else n) + "\n")
    with open(os.path.join(here, "..", "..", "..", "crates", "sim", "src", "llamacpp_flags.txt"), "w") as f:
        f.write(
            f"# llama-server's options from {build} (common/arg.cpp), written by\n"
            "# src/engine/flags/llamacpp_from_arg_cpp.py: KIND SPELLINGS [| NEGATED SPELLINGS]\n"
            "# (switch: no value; value: one; value2: two).\n"
        )
        for kind, names, neg in opts:
            f.write(" ".join([kind] + names + (["|"] + neg if neg else [])) + "\n")


if __name__ == "__main__":
    main()
