# off: no static checks at all. For testing the sandbox with candidates the
# checker would stop before they run (tests/integration/test_escapes.py), and
# for clients that judge candidates themselves. Results still carry dynamic
# verdicts.
default off                        # every rule
