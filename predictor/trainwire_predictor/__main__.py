from trainwire_predictor.server import main

main()
