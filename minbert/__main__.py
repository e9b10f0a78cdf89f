"""`python -m minbert`: the same as the `minbert` command."""
from minbert.commands.main import main

main()
