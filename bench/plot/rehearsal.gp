# completed requests/s over time in the 902K rehearsal (bench/rehearsal.py)
set terminal pngcairo size 900,520 font "sans,11"
set output "@PNG@"
set title "@TITLE@"
set xlabel "seconds since infergate-bulk started"
set ylabel "completed requests/s"
set y2label "completed requests"
set format y "%.0s%c"
set format y2 "%.0s%c"
set yrange [0:*]
set y2range [0:*]
set ytics nomirror
set y2tics
set grid
set key top left
plot "@DAT@" using 1:3 axes x1y1 with lines lw 2 title "requests/s", \
     "" using 1:2 axes x1y2 with lines lw 1 dt 2 title "done (right axis)"
