# Drawn by `kvtier report`; redraw from this folder with: gnuplot save_rate.gp
set terminal svg size 900,520 dynamic background rgb 'white' font 'sans,12'
set output 'save_rate.svg'
set termoption noenhanced
set title 'Saves: rate offered and absorbed against the target rate'
set xlabel 'target rate (GB/s)'
set ylabel 'GB/s (1e9 bytes/s)'
set grid
set key below
set yrange [0:*]
$d0 << EOD
1.17938 1.17938
1.47422 1.47422
1.62164 1.62164
1.76907 1.76907
2.35876 2.35876
4.71751 4.71751
EOD
$d1 << EOD
1.17938 1.18574
1.47422 1.46305
1.62164 1.54058
1.76907 1.53976
2.35876 1.62734
4.71751 1.55459
EOD
$d2 << EOD
1.17938 1.87916
4.71751 1.87916
EOD
$d3 << EOD
1.17938 1.17938
1.76907 1.76907
2.06391 2.06391
2.21133 2.21133
2.35876 2.35876
4.71751 4.70488
EOD
$d4 << EOD
1.17938 1.20215
1.76907 1.77635
2.06391 2.00205
2.21133 1.99053
2.35876 1.71511
4.71751 1.68242
EOD
$d5 << EOD
1.17938 2.3025
4.71751 2.3025
EOD
plot $d0 using 1:2 with linespoints lw 2 pt 7 lc 1 dt 1 title 'offered: file:///work/benchdir-save, llama-3.1-8b (save-file-2048.json)', \
     $d1 using 1:2 with linespoints lw 2 pt 7 lc 2 dt 1 title 'absorbed: file:///work/benchdir-save, llama-3.1-8b (save-file-2048.json)', \
     $d2 using 1:2 with linespoints lw 2 pt 7 lc 3 dt 2 title 'fio O_DIRECT write, same disk: file:///work/benchdir-save, llama-3.1-8b (save-file-2048.json)', \
     $d3 using 1:2 with linespoints lw 2 pt 7 lc 4 dt 1 title 'offered: fs:///work/benchdir-save, llama-3.1-8b (save-fs-2049.json)', \
     $d4 using 1:2 with linespoints lw 2 pt 7 lc 5 dt 1 title 'absorbed: fs:///work/benchdir-save, llama-3.1-8b (save-fs-2049.json)', \
     $d5 using 1:2 with linespoints lw 2 pt 7 lc 6 dt 2 title 'fio O_DIRECT write, same disk: fs:///work/benchdir-save, llama-3.1-8b (save-fs-2049.json)'
