#!/usr/bin/env python3
"""Generates the C++ checks of the test double's HIP declarations.

Usage: double_hip.py <double's hip/hip_runtime.h> <output dir>

The double declares, in its own words, the HIP types and functions it uses.
This reads those declarations and writes translation units that a compiler
checks against the real <hip/hip_runtime_api.h>:

  fn_<name>.cpp  one per function: the real header must declare the function
                 with exactly the double's type, and re-declaring the
                 double's declaration with C linkage must not conflict.
  layout.cpp     the double's structs (size, alignment, each field's offset
                 and size), enums (size, each enumerator's value), opaque
                 handle typedefs (same tag as the real one) and object-like
                 macros (same value), each compared with static_assert.

It prints one line per check it generated. The parser handles the subset of
C that such a header uses (typedefs of structs and enums, function
prototypes, object-like #defines, an extern "C" block) and fails loudly on a
top-level declaration it does not recognise, so that a new kind of
declaration is not silently left unchecked.
"""
import os
import re
import sys

IDENT = r"[A-Za-z_]\w*"


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def split_preprocessor(text):
    """Returns (object-like macro names, text without preprocessor lines)."""
    macros, kept = [], []
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("#"):
            m = re.match(r"#\s*define\s+(" + IDENT + r")(\s+|$)", s)
            if m and not re.match(r"#\s*define\s+" + IDENT + r"\(", s):
                if s[m.end():].strip():
                    macros.append(m.group(1))
            continue
        kept.append(line)
    return macros, "\n".join(kept)


def top_level_statements(text):
    """Splits at ';' outside braces; an extern "C" { } block is transparent."""
    text = re.sub(r'extern\s+"C"\s*\{', "\x01", text)
    stmts, cur, depth, transparent = [], [], 0, []
    for ch in text:
        if ch == "\x01":
            transparent.append(depth)
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            if transparent and transparent[-1] == depth:
                transparent.pop()
                continue
            depth -= 1
        if ch == ";" and depth == 0:
            stmts.append(" ".join("".join(cur).split()))
            cur = []
            continue
        cur.append(ch)
    rest = " ".join("".join(cur).split())
    if rest:
        raise SystemExit(f"double_hip.py: unterminated declaration: {rest!r}")
    return [s for s in stmts if s]


def split_depth0(body, sep):
    parts, cur, depth = [], [], 0
    for ch in body:
        if ch in "({[":
            depth += 1
        elif ch in ")}]":
            depth -= 1
        if ch == sep and depth == 0:
            parts.append("".join(cur).strip())
            cur = []
            continue
        cur.append(ch)
    if "".join(cur).strip():
        parts.append("".join(cur).strip())
    return parts


def parse(stmts):
    found = {"functions": [], "structs": [], "enums": [], "handles": [], "typedefs": []}
    for s in stmts:
        m = re.match(r"(?:typedef\s+)?enum\s+(?:\w+\s+)*?(" + IDENT + r")\s*\{(.*)\}\s*(" + IDENT + r")?$", s)
        if m:
            names = [re.match(IDENT, e).group(0) for e in split_depth0(m.group(2), ",")]
            found["enums"].append((m.group(3) or m.group(1), names))
            continue
        m = re.match(r"(?:typedef\s+)?struct\s+(" + IDENT + r")\s*\{(.*)\}\s*(" + IDENT + r")?$", s)
        if m:
            fields = []
            for member in split_depth0(m.group(2), ";"):
                if "(" in member or not member:
                    continue  # constructors and other member functions
                decls = split_depth0(member, ",")
                for d in decls:
                    d = re.sub(r"\[.*?\]|:\s*\d+\s*$", "", d)
                    fields.append(re.findall(IDENT, d)[-1])
            found["structs"].append((m.group(3) or m.group(1), fields))
            continue
        m = re.match(r"typedef\s+struct\s+(" + IDENT + r")\s*\*\s*(" + IDENT + r")$", s)
        if m:
            found["handles"].append((m.group(2), m.group(1)))
            continue
        m = re.match(r"typedef\s+(.+?)\s*(" + IDENT + r")$", s)
        if m and "(" not in s:
            found["typedefs"].append(m.group(2))
            continue
        m = re.match(r"(?:extern\s+)?(.+?)\b(hip\w*)\s*\((.*)\)$", s)
        if m and "{" not in s:
            found["functions"].append((m.group(2), s))
            continue
        raise SystemExit(f"double_hip.py: a declaration this check does not know how to compare: {s!r}")
    return found


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    header, out = os.path.abspath(sys.argv[1]), sys.argv[2]
    os.makedirs(out, exist_ok=True)
    macros, code = split_preprocessor(strip_comments(open(header, encoding="utf-8").read()))
    found = parse(top_level_statements(code))

    for name, decl in found["functions"]:
        with open(os.path.join(out, f"fn_{name}.cpp"), "w", encoding="utf-8") as f:
            f.write(
                f"// The double's declaration: {decl};\n"
                "#include <hip/hip_runtime_api.h>\n"
                f"namespace ours {{\n{decl};\n}}\n"
                "// The real header must declare the function with the double's exact\n"
                "// type (among its overloads, if it has several).\n"
                f"[[maybe_unused]] static decltype(&ours::{name}) const real_{name} = &::{name};\n"
                "// And the double's declaration must be a valid redeclaration of it.\n"
                f'extern "C" {{\n{decl};\n}}\n'
            )
        print(f"function {name}")

    lines = [
        "// Layout and values of the double's HIP types against the real header.",
        "#include <cstddef>",
        "#include <cstdint>",
        "#include <type_traits>",
        "#include <hip/hip_runtime_api.h>",
        "",
        "// The double's macros are redefined by its header below; keep the real values.",
    ]
    for mac in macros:
        lines += [f"constexpr auto real_macro_{mac} = {mac};", f"#undef {mac}"]
    lines.append("// The double's C-linkage functions would clash with the real ones; rename them.")
    for name, _ in found["functions"]:
        lines.append(f"#define {name} double_fn_{name}")
    lines += ["namespace dbl {", f'#include "{header}"', "}"]
    for name, _ in found["functions"]:
        lines.append(f"#undef {name}")
    for mac in macros:
        lines += [
            f"constexpr auto double_macro_{mac} = {mac};",
            f'static_assert(real_macro_{mac} == double_macro_{mac}, "macro {mac}: value differs");',
        ]
        print(f"macro {mac}")
    for name, fields in found["structs"]:
        lines += [
            f'static_assert(sizeof(::{name}) == sizeof(dbl::{name}), "struct {name}: size differs");',
            f'static_assert(alignof(::{name}) == alignof(dbl::{name}), "struct {name}: alignment differs");',
        ]
        for fld in fields:
            lines += [
                f'static_assert(offsetof(::{name}, {fld}) == offsetof(dbl::{name}, {fld}), '
                f'"struct {name}: offset of {fld} differs");',
                f"static_assert(sizeof(::{name}::{fld}) == sizeof(dbl::{name}::{fld}), "
                f'"struct {name}: size of {fld} differs");',
            ]
        print(f"struct {name} ({', '.join(fields)})")
    for name, values in found["enums"]:
        lines.append(f'static_assert(sizeof(::{name}) == sizeof(dbl::{name}), "enum {name}: size differs");')
        for v in values:
            lines.append(
                f"static_assert(static_cast<long long>(::{v}) == static_cast<long long>(dbl::{v}), "
                f'"enum {name}: value of {v} differs");'
            )
        print(f"enum {name} ({', '.join(values)})")
    for alias, tag in found["handles"]:
        lines.append(
            f"static_assert(std::is_same_v<::{alias}, ::{tag}*>, "
            f'"handle {alias}: the real one is not a pointer to struct {tag}");'
        )
        print(f"handle {alias} (struct {tag}*)")
    for name in found["typedefs"]:
        lines.append(f'static_assert(sizeof(::{name}) == sizeof(dbl::{name}), "typedef {name}: size differs");')
        print(f"typedef {name}")
    with open(os.path.join(out, "layout.cpp"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
