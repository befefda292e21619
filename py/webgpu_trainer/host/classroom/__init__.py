"""Classroom mode: a teacher serves the page to a class over HTTPS on the LAN, students join a
session (pinned model, data, hyperparameters and seed) with a display name and train on their
own GPUs, and the teacher watches a live dashboard; results are kept in a database.

Modules: ``app`` (assembly), ``student`` and ``teacher`` (routes), ``store`` (SQLAlchemy Core:
SQLite or PostgreSQL), ``config`` (the session's run config check), ``common`` (bodies,
credentials, security headers), ``limits`` (rate and size limits), ``tls`` (certificates,
LAN addresses, QR codes), ``changes`` (wakes the dashboard stream on writes), ``tokens`` (the
teacher token's scrypt hash), ``https_only`` (plain http on the HTTPS port redirected). The
command is ``webgpu-trainer classroom`` (``cli/classroom.py``).
"""
