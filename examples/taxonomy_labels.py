"""Label descriptions for the Debian taxonomy of the dev corpus (data/debian-dev-labels.jsonl.gz).

Sections: Debian's own one-line descriptions of its archive sections (as packages.debian.org
lists them, shortened). Debtags: the facet's name from the debtags vocabulary and the tag's
value in words (`implemented-in::c` -> "Implemented in: c"); the vocabulary's per-tag
descriptions are not shipped here.
"""

from __future__ import annotations

SECTIONS = {
    "admin": "Administration utilities: administer system resources, manage user accounts",
    "cli-mono": "Mono/CLI: everything about Mono and the Common Language Infrastructure",
    "comm": "Communication programs: modems, serial lines, fax",
    "database": "Databases: database servers and clients",
    "debug": "Debug packages: debugging information for executables and shared libraries",
    "devel": "Development: development utilities, compilers, development environments",
    "doc": "Documentation: FAQs, HOWTOs, manuals and software to browse documentation",
    "editors": "Editors: software to edit files, programming environments",
    "education": "Education: software for learning and teaching",
    "electronics": "Electronics: electronics utilities, circuit design and simulation",
    "fonts": "Fonts: font packages and font tools",
    "games": "Games: programs to spend a nice time with",
    "gnome": "GNOME: the GNOME desktop environment",
    "gnu-r": "GNU R: everything about GNU R, a statistical computation and graphics system",
    "gnustep": "GNUstep: the GNUstep environment",
    "golang": "Go: the Go programming language, libraries and development tools",
    "graphics": "Graphics: image editors, viewers, converters",
    "hamradio": "Ham radio: software for amateur radio",
    "haskell": "Haskell: everything about Haskell",
    "httpd": "Web servers: web servers and their modules",
    "interpreters": "Interpreters: interpreters for interpreted languages, macro processors",
    "introspection": "Introspection: machine readable introspection data for development tools",
    "java": "Java: everything about Java",
    "javascript": "JavaScript: the JavaScript language, libraries and development tools",
    "kde": "KDE: the KDE desktop environment",
    "kernel": "Kernels: operating system kernels and related modules",
    "libdevel": "Library development: headers and libraries needed to write programs that use them",
    "libs": "Libraries: shared libraries that make other programs work",
    "lisp": "Lisp: everything about Lisp",
    "localization": "Language packs: localization support for big software packages",
    "mail": "Mail: programs to route, read and compose e-mail messages",
    "math": "Mathematics: math software",
    "metapackages": "Meta packages: packages that mainly depend on other packages",
    "misc": "Miscellaneous: utilities that fit nowhere else",
    "net": "Network: daemons and clients to connect your system to the world",
    "news": "Newsgroups: software to read Usenet and run news servers",
    "ocaml": "OCaml: everything about OCaml, an ML language implementation",
    "oldlibs": "Old libraries: old versions of libraries kept for backward compatibility",
    "otherosfs": "Other OSs and file systems: run programs of other systems, use their file systems",
    "perl": "Perl: everything about Perl, an interpreted scripting language",
    "php": "PHP: everything about PHP",
    "python": "Python: everything about Python, an interpreted object-oriented language",
    "ruby": "Ruby: everything about Ruby, an interpreted object-oriented language",
    "rust": "Rust: the Rust language, library crates and development tools",
    "science": "Science: basic tools for scientific work",
    "shells": "Shells: command shells",
    "sound": "Sound: mixers, players, recorders and other audio utilities",
    "tasks": "Tasks: packages that set a system up for a specific task",
    "tex": "TeX: the TeX typesetting system and related programs",
    "text": "Text processing: utilities to format and print text documents",
    "utils": "Utilities: file and disk tools, backup and archive tools, system monitoring",
    "vcs": "Version control systems and related utilities",
    "video": "Video: video players, editors, recording and streaming",
    "web": "Web software: browsers, proxies, download tools",
    "x11": "X Window System: X servers, libraries, window managers, terminal emulators",
    "xfce": "Xfce: a fast and lightweight desktop environment",
}

FACETS = {
    "accessibility": "Accessibility", "admin": "System administration", "biology": "Biology",
    "culture": "Culture", "devel": "Software development", "field": "Field", "game": "Games and amusement",
    "hardware": "Hardware enablement", "implemented-in": "Implemented in", "interface": "User interface",
    "iso15924": "Writing script", "junior": "Junior", "mail": "Electronic mail", "made-of": "Made of",
    "network": "Networking", "office": "Office", "privacy": "Privacy", "protocol": "Network protocol",
    "role": "Role", "science": "Science", "scope": "Scope", "security": "Security", "sound": "Sound",
    "suite": "Application suite", "system": "System", "uitoolkit": "Interface toolkit", "use": "Purpose",
    "web": "World Wide Web", "works-with": "Works with", "works-with-format": "Supports format",
    "x11": "X Window System",
}


def section_text(section: str) -> str:
    return SECTIONS.get(section, section)


def tag_text(tag: str) -> str:
    """`devel::lang:perl` -> "Software development: lang perl"."""
    facet, _, value = tag.partition("::")
    words = value.replace("-", " ").replace(":", " ").replace("+", " plus ")
    return f"{FACETS.get(facet, facet)}: {words}"
