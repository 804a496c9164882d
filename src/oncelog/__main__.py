from oncelog.cli.main import main

main()
