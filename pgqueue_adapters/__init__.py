"""Driver adapters for pgqueue: each subpackage implements the driver protocols for one library.

Import an adapter only when its library is installed (``pip install 'pgqueue[psycopg]'``);
``pgqueue`` itself never imports them at import time.
"""
