from trainwire_coordinator.server import main

main()
