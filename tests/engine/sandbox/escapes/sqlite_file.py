import sqlite3
sqlite3.connect('MARKER_PATH')
