from llmtk.cli import main

main()
