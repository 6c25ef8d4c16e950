"""Plug-ins that tests register: each shows one seam of docs/extending.md grown from outside."""
